from django.apps import AppConfig


class LessonsConfig(AppConfig):
    name = "lessons"
    verbose_name = "Lessons and memory"

    def ready(self) -> None:
        from lessons.review import overview as review_overview

        review_overview.register()
