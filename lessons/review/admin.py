"""Admin for memory targets, review runs and proposals. ``lessons/admin.py`` imports this module (one line)
for the admin's autodiscovery to see it, since ``lessons.review`` is not an app of its own."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from lessons.review.models import MemoryDocument, MemoryVersion, Proposal, ReviewRun


class MemoryVersionInline(admin.TabularInline):
    model = MemoryVersion
    extra = 0
    fields = ["number", "action", "message", "actor", "reason", "created_at"]
    readonly_fields = ["number", "action", "message", "actor", "reason", "created_at"]
    can_delete = False


@admin.register(MemoryDocument)
class MemoryDocumentAdmin(admin.ModelAdmin):
    list_display = ["workspace", "target", "version", "updated_at"]
    list_filter = ["target"]
    search_fields = ["workspace__slug"]
    readonly_fields = ["workspace", "target", "entries", "version", "updated_at"]
    inlines = [MemoryVersionInline]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # written by the system; an Add form here could only crash or forge history


@admin.register(ReviewRun)
class ReviewRunAdmin(admin.ModelAdmin):
    list_display = ["id", "workspace", "agent", "status", "model", "prompt_version", "created_at"]
    list_filter = ["status", "prompt_version", "created_at"]
    search_fields = ["summary", "agent", "error"]
    readonly_fields = [
        "workspace",
        "agent",
        "summary",
        "prompt_version",
        "model",
        "raw_output",
        "status",
        "error",
        "token",
        "created_at",
    ]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # written by the system; an Add form here could only crash or forge history


@admin.register(Proposal)
class ProposalAdmin(admin.ModelAdmin):
    list_display = ["id", "workspace", "target", "op", "score", "status", "decision", "decided_by", "created_at"]
    list_filter = ["status", "target", "op", "decision", "gate"]
    search_fields = ["content", "old_text", "rationale", "reason", "message", "agent"]
    raw_id_fields = ["run", "workspace", "memory_version", "lesson_ref", "decided_by", "reserved_by"]
    readonly_fields = ["original", "auto_approve", "gate_reason", "message"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # written by the system; an Add form here could only crash or forge history
