from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from lessonboard.models import AuditEvent
from lessons.models import Lesson, LessonStatus, LessonVersion
from lessons.store import schedule_embedding, set_status


class LessonVersionInline(admin.TabularInline):
    model = LessonVersion
    extra = 0
    fields = ["number", "action", "actor", "reason", "created_at"]
    readonly_fields = ["number", "action", "actor", "reason", "created_at"]
    can_delete = False


@admin.register(Lesson)
class LessonAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "situation",
        "trigger",
        "status",
        "workspace",
        "agent",
        "access_count",
        "confidence",
        "embedding_model",
        "created_at",
    ]
    list_filter = ["status", "trigger", "category", "embedding_model", "created_at"]
    search_fields = ["situation", "mistake", "correction", "content", "fact_id", "source_job_id", "agent"]
    raw_id_fields = ["workspace", "superseded_by"]
    # Text changes go through the lesson pages (they write a version); the admin shows and archives.
    readonly_fields = [
        "situation",
        "mistake",
        "correction",
        "tags",
        "trigger",
        "content",
        "fact_id",
        "confidence",
        "provenance",
        "access_count",
        "last_accessed",
        "score",
        "source_job_id",
        "status",
        "superseded_by",
        "embedding_model",
        "embedded_at",
        "chatcli_extra",
        "created_at",
        "updated_at",
    ]
    exclude = ["embedding"]
    inlines = [LessonVersionInline]
    show_full_result_count = False
    actions = ["archive", "queue_embedding"]

    @admin.action(description="Archive the selected lessons (a version each)")
    def archive(self, request: HttpRequest, queryset: QuerySet[Lesson]) -> None:
        archived = []
        for lesson in queryset.filter(status=LessonStatus.ACTIVE):
            set_status(
                lesson,
                LessonStatus.ARCHIVED,
                actor=f"user:{request.user.get_username()}",
                user=request.user,
                reason="admin",
            )
            archived.append(lesson.pk)
        # On /audit/ like the page's archive (the admin walk test found this action unaudited).
        AuditEvent.record(
            "lesson.archive", user=request.user, object_type="lesson", object_ids=archived, reason="admin"
        )
        self.message_user(request, f"{len(archived)} lesson(s) archived.", messages.SUCCESS)

    @admin.action(description="Recompute the vectors of the selected lessons")
    def queue_embedding(self, request: HttpRequest, queryset: QuerySet[Lesson]) -> None:
        ids = list(queryset.values_list("id", flat=True))
        schedule_embedding(ids)
        AuditEvent.record("lesson.reembed", user=request.user, object_type="lesson", object_ids=ids, reason="admin")
        self.message_user(request, "Embedding queued on the 'embed' worker queue.", messages.SUCCESS)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # lessons enter through the store (API, pages, queue, import)


@admin.register(LessonVersion)
class LessonVersionAdmin(admin.ModelAdmin):
    list_display = ["lesson", "number", "action", "actor", "created_at"]
    list_filter = ["action", "created_at"]
    search_fields = ["actor", "reason"]
    raw_id_fields = ["lesson", "actor_user"]
    readonly_fields = [
        "lesson",
        "number",
        "action",
        "snapshot",
        "actor",
        "actor_user",
        "reason",
        "source_job_id",
        "created_at",
    ]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # written by the system; an Add form here could only crash or forge history


import lessons.reflect.admin  # noqa: E402 - doc reflection registers its own admins
import lessons.review.admin  # noqa: E402, F401 - gated memory writes register their own admins
