"""The queue's three gauges (docs/compat/chatcli.md#metrics), computed at scrape time from this node's
WAL/DLQ directories and the database, so they are right across processes (unlike chatcli, whose WAL and
DLQ share one gauge). Registered with the project's ``/metrics`` by ``lessonq.apps``; kept apart from the
counters in ``lessonq.metrics`` because it reads the models and the WAL, which count."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from lessonq import leader, presence
from lessonq.models import Job
from lessonq.paths import dlq, wal


class QueueGaugeCollector(Collector):
    """``queue_depth`` (this node's pending/retry_wait jobs), ``dlq_size`` and ``wal_segments`` (file counts)."""

    def collect(self) -> Iterator[Metric]:
        try:
            depth = Job.objects.for_this_node().waiting().count()
        except Exception:  # the database is down: report the WAL, not an error page
            depth = wal().count()
        yield GaugeMetricFamily("chatcli_lessonq_queue_depth", "Queued lesson jobs (excludes in-flight).", value=depth)
        yield GaugeMetricFamily("chatcli_lessonq_dlq_size", "Records in the dead-letter queue.", value=dlq().count())
        yield GaugeMetricFamily("chatcli_lessonq_wal_segments", "Records in the active WAL.", value=wal().count())


class NodeCollector(Collector):
    """``lessonboard_lessonq_node_up{node}`` (1 while the node's worker holds its lease, 0 for a node whose
    lease ran out in the last day: the "node lost" alert) and ``lessonboard_scheduler_up`` (1 while a beat
    holds the scheduler's leader lease: the "no scheduler" alert), read from the lease rows at scrape time,
    so every node's web reports the whole deployment."""

    def collect(self) -> Iterator[Metric]:
        try:
            states = presence.nodes()
            scheduler = leader.state()
        except Exception:  # the database is down: /readyz and the database alerts say so
            return
        up = GaugeMetricFamily(
            "lessonboard_lessonq_node_up",
            "1 while the node's lesson worker holds its lease; 0 once it ran out (in the last day).",
            labels=["node"],
        )
        for state in states:
            if state.worker_live or state.gone:
                up.add_metric([state.node], int(state.worker_live))
        yield up
        yield GaugeMetricFamily(
            "lessonboard_scheduler_up",
            "1 while some beat holds the scheduler's leader lease (the periodic work runs).",
            value=int(scheduler is not None and scheduler.live),
        )
