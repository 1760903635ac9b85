from django.apps import AppConfig


class LessonsConfig(AppConfig):
    name = "lessons"
    verbose_name = "Lessons and memory"

    def ready(self) -> None:
        from django.core import checks

        from lessonboard import overview
        from lessons import checks as lesson_checks
        from lessons.models import Lesson, LessonStatus

        checks.register(lesson_checks.embedding_dimensions, "lessons")
        checks.register(lesson_checks.embedding_packages, "lessons")
        checks.register(lesson_checks.embedding_column, checks.Tags.database)
        overview.SECTIONS.extend(
            [
                overview.Count("Lessons", "Active lessons", lambda: Lesson.objects.active().count(), "lessons:search"),
                overview.Count(
                    "Lessons",
                    "Archived or superseded",
                    lambda: Lesson.objects.exclude(status=LessonStatus.ACTIVE).count(),
                    None,
                ),
                overview.Count(
                    "Lessons",
                    "Active lessons waiting for a vector",
                    lambda: Lesson.objects.active().filter(embedding__isnull=True).count(),
                    None,
                ),
            ]
        )
        from lessons.review import overview as review_overview

        review_overview.register()
