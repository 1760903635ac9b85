from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from refine.models import AgentRefineMode, RefinePass, RefineRun


class RefinePassInline(admin.TabularInline):
    model = RefinePass
    extra = 0
    can_delete = False
    fields = ["number", "decision", "decided_by", "similarity_to_original", "degraded_from", "latency_ms"]
    readonly_fields = ["number", "decision", "decided_by", "similarity_to_original", "degraded_from", "latency_ms"]
    show_change_link = True


@admin.register(RefineRun)
class RefineRunAdmin(admin.ModelAdmin):
    list_display = ["id", "agent", "status", "pass_count", "converged", "rolled_back", "low_quality", "created_at"]
    list_filter = ["status", "converged", "rolled_back", "low_quality", "created_at"]
    search_fields = ["agent", "task"]
    readonly_fields = ["requested_by", "output_chosen_by", "created_at", "started_at", "finished_at", "duration_ms"]
    inlines = [RefinePassInline]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # written by the system; an Add form here could only crash or forge history


@admin.register(RefinePass)
class RefinePassAdmin(admin.ModelAdmin):
    list_display = ["id", "run", "number", "decision", "decided_by", "similarity_to_original", "protocol_ok"]
    list_filter = ["decision", "decided_by", "protocol_ok"]
    readonly_fields = ["run", "proposed_lesson", "created_at"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # written by the system; an Add form here could only crash or forge history


@admin.register(AgentRefineMode)
class AgentRefineModeAdmin(admin.ModelAdmin):
    list_display = ["agent", "mode", "updated_at", "updated_by"]
    readonly_fields = ["updated_by", "updated_by_token"]
