from django.contrib import admin

from lessons.models import Lesson, LessonVersion


class LessonVersionInline(admin.TabularInline):
    model = LessonVersion
    extra = 0
    fields = ["number", "action", "actor", "reason", "created_at"]
    readonly_fields = ["number", "action", "actor", "reason", "created_at"]
    can_delete = False


@admin.register(Lesson)
class LessonAdmin(admin.ModelAdmin):
    list_display = ["id", "situation", "trigger", "status", "workspace", "agent", "access_count", "created_at"]
    list_filter = ["status", "trigger", "category", "created_at"]
    search_fields = ["situation", "mistake", "correction", "content", "fact_id", "source_job_id", "agent"]
    raw_id_fields = ["workspace", "superseded_by"]
    inlines = [LessonVersionInline]
    show_full_result_count = False


@admin.register(LessonVersion)
class LessonVersionAdmin(admin.ModelAdmin):
    list_display = ["lesson", "number", "action", "actor", "created_at"]
    list_filter = ["action", "created_at"]
    search_fields = ["actor", "reason"]
    raw_id_fields = ["lesson", "actor_user"]


import lessons.reflect.admin  # noqa: E402 - doc reflection registers its own admins
import lessons.review.admin  # noqa: E402, F401 - gated memory writes register their own admins
