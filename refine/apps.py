from django.apps import AppConfig


class RefineConfig(AppConfig):
    name = "refine"
    verbose_name = "Self-Refine"
