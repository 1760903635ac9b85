from typing import Any

from django.apps import AppConfig


class QueueConfig(AppConfig):
    # The package is `lessonq` because a top-level `queue` package would shadow the standard library's
    # `queue` (imported by Django, kombu and Celery); the app keeps the label `queue`.
    name = "lessonq"
    label = "queue"
    verbose_name = "Queue"

    def ready(self) -> None:
        from celery.signals import worker_ready, worker_shutting_down

        from lessonboard import metrics as project_metrics
        from lessonboard.overview import SECTIONS, Count
        from lessonq import metrics
        from lessonq.models import Job

        if not any(isinstance(c, metrics.QueueGaugeCollector) for c in project_metrics.EXTRA_COLLECTORS):
            project_metrics.EXTRA_COLLECTORS.append(metrics.QueueGaugeCollector())
        _register_triage_collector(project_metrics.EXTRA_COLLECTORS)  # issue 5
        SECTIONS.extend(
            [
                Count("Lesson queue", "Pending jobs", lambda: Job.objects.waiting().count(), None),
                Count("Lesson queue", "Retrying jobs", lambda: Job.objects.filter(state="retry_wait").count(), None),
                Count("Lesson queue", "Dead jobs (DLQ)", lambda: Job.objects.dead().count(), None),
                Count("Lesson queue", "Succeeded jobs", lambda: Job.objects.succeeded().count(), None),
            ]
        )
        worker_ready.connect(_replay_at_worker_start, weak=False, dispatch_uid="lessonq-replay")
        worker_shutting_down.connect(_bound_the_drain, weak=False, dispatch_uid="lessonq-drain")


def _register_triage_collector(collectors: list[Any]) -> None:
    from lessonq.triage_metrics import TriageCollector

    if not any(isinstance(c, TriageCollector) for c in collectors):
        collectors.append(TriageCollector())


def _replay_at_worker_start(sender: Any = None, **_: Any) -> None:
    """Framework hook: a worker consuming this node's lesson queue replays the node's WAL once ready."""
    from django.conf import settings

    from lessonq.lifecycle import replay_at_start

    # The consumer's queues (-Q): only a worker serving this node's lesson queue replays its WAL.
    consumer = getattr(sender, "task_consumer", None)
    queues = {q.name for q in getattr(consumer, "queues", [])}
    replay_at_start(consumes=settings.LESSONQ_QUEUE in queues or not queues)


def _bound_the_drain(sig: str = "", how: str = "", exitcode: int = 0, **_: Any) -> None:
    from lessonq.lifecycle import bound_drain

    bound_drain(how)
