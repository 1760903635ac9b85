from django.apps import AppConfig


class LessonsConfig(AppConfig):
    name = "lessons"
    verbose_name = "Lessons and memory"
