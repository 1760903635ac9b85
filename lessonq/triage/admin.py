"""Admin for the triage rows: read-only records of bulk actions and retention runs."""

from __future__ import annotations

from django.contrib import admin

from lessonq.triage.models import BulkAction, BulkItem, RetentionRun


class BulkItemInline(admin.TabularInline):
    model = BulkItem
    fields = ("position", "job_id", "outcome", "message")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False


@admin.register(BulkAction)
class BulkActionAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "scope", "state", "processed", "total", "failed", "created_by", "created_at")
    list_filter = ("kind", "state", "scope")
    readonly_fields = (
        "kind", "state", "created_by", "scope", "filter", "matched", "cap", "total", "processed", "succeeded",
        "failed", "error", "created_at", "started_at", "finished_at",
    )  # fmt: skip
    inlines = [BulkItemInline]
    show_full_result_count = False

    def has_add_permission(self, request: object) -> bool:
        return False


@admin.register(RetentionRun)
class RetentionRunAdmin(admin.ModelAdmin):
    list_display = ("ran_at", "node", "over_cap", "over_age", "archived", "export_path")
    readonly_fields = ("node", "ran_at", "over_cap", "over_age", "archived", "export_path")

    def has_add_permission(self, request: object) -> bool:
        return False
