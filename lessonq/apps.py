from django.apps import AppConfig


class QueueConfig(AppConfig):
    # The package is `lessonq` because a top-level `queue` package would shadow the standard library's
    # `queue` (imported by Django, kombu and Celery); the app keeps the label `queue`.
    name = "lessonq"
    label = "queue"
    verbose_name = "Queue"
