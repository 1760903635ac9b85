from collections.abc import Callable
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
        from lessonq.gauges import NodeCollector, QueueGaugeCollector

        if not any(isinstance(c, QueueGaugeCollector) for c in project_metrics.EXTRA_COLLECTORS):
            project_metrics.EXTRA_COLLECTORS.append(QueueGaugeCollector())
        _register_triage_collector(project_metrics.EXTRA_COLLECTORS)
        if not any(isinstance(c, NodeCollector) for c in project_metrics.EXTRA_COLLECTORS):
            project_metrics.EXTRA_COLLECTORS.append(NodeCollector())
        from lessonboard import health
        from lessonboard.lifecycle import WEB_WORKER_STARTED
        from lessonq import leader, presence

        def start_web_presence() -> None:
            presence.WebPresence().start()

        if not any(getattr(h, "__qualname__", "").endswith("start_web_presence") for h in WEB_WORKER_STARTED):
            WEB_WORKER_STARTED.append(start_web_presence)

        # /readyz (advisory, "degraded"): a node that is gone and who adopted its jobs; no scheduler.
        health.ADVISORY.setdefault("nodes", presence.check_nodes)
        health.ADVISORY.setdefault("scheduler", leader.check_scheduler)
        from lessonq.triage import queries as triage

        # The queue page's own counts: shared through the cache and estimated on big tables, so the
        # Overview's polling costs no COUNT over 100k dead jobs per viewer.
        def tab(slug: str) -> Callable[[], int]:
            return lambda: triage.tab_counts()[slug].value

        SECTIONS.extend(
            [
                Count("Lesson queue", "Pending jobs", tab("pending"), "queue:index", "tab=pending"),
                Count("Lesson queue", "Retrying jobs", tab("retrying"), "queue:index", "tab=retrying"),
                Count("Lesson queue", "Dead jobs (DLQ)", tab("dead"), "queue:index", "tab=dead"),
                Count("Lesson queue", "Done jobs (recent)", tab("done"), "queue:index", "tab=done"),
            ]
        )
        from lessonboard import breaker

        if _sweep_when_the_llm_is_back not in breaker.RECOVERY_HOOKS:
            breaker.RECOVERY_HOOKS.append(_sweep_when_the_llm_is_back)
        worker_ready.connect(_replay_at_worker_start, weak=False, dispatch_uid="lessonq-replay")
        worker_shutting_down.connect(_bound_the_drain, weak=False, dispatch_uid="lessonq-drain")


def _sweep_when_the_llm_is_back() -> None:
    """The LLM breaker closed: sweep every node now, so jobs that waited are dispatched at once."""
    from lessonq.tasks import sweep_all

    sweep_all.delay()


def _register_triage_collector(collectors: list[Any]) -> None:
    from lessonq.triage.metrics import TriageCollector

    if not any(isinstance(c, TriageCollector) for c in collectors):
        collectors.append(TriageCollector())


def _replay_at_worker_start(sender: Any = None, **_: Any) -> None:
    """Framework hook: a worker consuming this node's lesson queue replays the node's WAL once ready."""
    from django.conf import settings

    from lessonq.lifecycle import replay_at_start

    # The consumer's queues (-Q): only a worker serving this node's lesson queue replays its WAL.
    consumer = getattr(sender, "task_consumer", None)
    queues = {q.name for q in getattr(consumer, "queues", [])}
    consumes = settings.LESSONQ_QUEUE in queues or not queues
    replay_at_start(consumes=consumes)
    if consumes:
        from lessonq.failover import Keeper
        from lessonq.lifecycle import start_once
        from lessonq.outbox import Dispatcher

        start_once("lease keeper", Keeper)  # the node's lease (docs/architecture.md#node-failover)
        start_once("outbox dispatcher", Dispatcher)  # the messages ingests owe (docs/architecture.md#order-of-effects)


def _bound_the_drain(sig: str = "", how: str = "", exitcode: int = 0, **_: Any) -> None:
    from lessonq.lifecycle import bound_drain

    bound_drain(how)
