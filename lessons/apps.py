from django.apps import AppConfig


class LessonsConfig(AppConfig):
    name = "lessons"
    verbose_name = "Lessons and memory"

    def ready(self) -> None:
        from django.core import checks

        from lessons import checks as lesson_checks

        checks.register(lesson_checks.embedding_dimensions, "lessons")
        checks.register(lesson_checks.embedding_packages, "lessons")
        checks.register(lesson_checks.embedding_column, checks.Tags.database)
        from lessons import overview as lesson_overview
        from lessons.review import overview as review_overview

        lesson_overview.register()
        review_overview.register()
