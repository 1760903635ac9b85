"""Read-only admin for doc reflection rows: decisions go through the workspace page (audited)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from lessons.reflect.models import DocProposal, ReflectEvent, ReflectManifest


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ReflectManifest)
class ReflectManifestAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "workspace", "session_id", "trigger_agent", "verdict", "forced", "status"]
    list_filter = ["status", "verdict", "forced", "created_at"]
    search_fields = ["session_id", "trigger_agent", "snapshot_hash", "workspace__slug"]
    raw_id_fields = ["workspace"]


@admin.register(ReflectEvent)
class ReflectEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "workspace", "event_type", "agent", "message"]
    list_filter = ["event_type", "created_at"]
    search_fields = ["message", "agent", "workspace__slug"]
    raw_id_fields = ["workspace"]
    show_full_result_count = False


@admin.register(DocProposal)
class DocProposalAdmin(ReadOnlyAdmin):
    list_display = ["id", "created_at", "workspace", "agent", "status", "decided_by", "decided_at"]
    list_filter = ["status", "created_at"]
    search_fields = ["agent", "reason", "error", "workspace__slug"]
    raw_id_fields = ["workspace", "manifest_record", "proposed_by_token", "decided_by"]
