from django.contrib import admin

from lessonq.models import Job, JobAttempt


class JobAttemptInline(admin.TabularInline):
    model = JobAttempt
    extra = 0
    can_delete = False
    readonly_fields = ("number", "worker", "started_at", "finished_at", "outcome", "error", "duration")


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "state", "trigger", "node", "attempts", "enqueued_at", "next_attempt_at", "short_error")
    list_filter = ("state", "trigger", "node")
    search_fields = ("id", "task", "last_error", "agent")
    date_hierarchy = "enqueued_at"
    readonly_fields = (
        "id",
        "node",
        "state",
        "task",
        "output",
        "outcome",
        "trigger",
        "agent",
        "workspace",
        "agent_token",
        "attempts",
        "enqueued_at",
        "next_attempt_at",
        "last_error",
        "waiting_reason",
        "dispatched_at",
        "claimed_by",
        "claim_expires_at",
        "lesson",
        "created_at",
        "updated_at",
        "finished_at",
    )
    inlines = [JobAttemptInline]

    @admin.display(description="last error")
    def short_error(self, obj: Job) -> str:
        return obj.last_error[:80]

    def has_add_permission(self, request: object) -> bool:
        return False  # jobs enter through the WAL (API, CLI, import), never by hand


@admin.register(JobAttempt)
class JobAttemptAdmin(admin.ModelAdmin):
    list_display = ("job", "number", "outcome", "started_at", "duration", "worker")
    list_filter = ("outcome",)
    search_fields = ("job__id", "error")
    readonly_fields = ("job", "number", "worker", "started_at", "finished_at", "outcome", "error", "duration")

    def has_add_permission(self, request: object) -> bool:
        return False


from lessonq.triage import admin as triage_admin  # noqa: E402,F401  (bulk actions and retention runs)
