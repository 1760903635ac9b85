from django.apps import AppConfig
from django.db.models.signals import post_migrate


class LessonboardConfig(AppConfig):
    name = "lessonboard"
    verbose_name = "lessonboard"

    def ready(self) -> None:
        # Framework hook only: keep the role groups in line with the permissions after each migrate.
        from lessonboard.roles import sync_roles

        post_migrate.connect(sync_roles, dispatch_uid="lessonboard.sync_roles")
