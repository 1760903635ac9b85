"""The ten ``chatcli_lessonq_*`` series (docs/compat/chatcli.md#metrics), with chatcli's names, types, labels and buckets.

Counters and the histogram are ordinary multiprocess-safe prometheus_client metrics. The three gauges
are computed at scrape time (``QueueGaugeCollector``) from this node's WAL/DLQ directories and the
database, so they are right across processes (unlike chatcli, whose WAL and DLQ share one gauge).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

ENQUEUE = Counter("chatcli_lessonq_enqueue_total", "Lesson jobs offered to the queue, by outcome.", ["outcome"])
PROCESSING_DURATION = Histogram(
    "chatcli_lessonq_processing_duration_seconds",
    "Time from dequeue to outcome of one lesson-job attempt.",
    ["outcome"],
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120),
)
ATTEMPTS = Counter("chatcli_lessonq_attempts_total", "Lesson-job attempts, by outcome.", ["outcome"])
RETRIES = Counter(
    "chatcli_lessonq_retry_total", "Transient failures scheduled for retry, by attempt number.", ["attempt"]
)
WAL_CORRUPTION = Counter("chatcli_lessonq_wal_corruption_total", "Corrupt WAL/DLQ records found (quarantined).")
STALE_DISCARDED = Counter("chatcli_lessonq_stale_discarded_total", "Replay discards of records older than stale_after.")
PERSIST_FAILURES = Counter("chatcli_lessonq_persist_failures_total", "Lesson persist errors.")
# Not one of chatcli's series: lessonboard's own.
POISON_RECORDS = Counter(
    "lessonboard_lessonq_poison_records_total",
    "Readable WAL/DLQ records quarantined because handling them alone kept failing (docs/operations.md#poison-records).",
)

ADOPTED_JOBS = Counter(
    "lessonboard_lessonq_adopted_jobs_total",
    "Jobs this node adopted from a node whose lease ran out (docs/architecture.md#node-failover), by that node"
    " and kind: active (its WAL record re-created here) or dead (its DLQ record re-created here).",
    ["from_node", "kind"],
)

ENQUEUE_OUTCOMES = ("accepted", "rejected_full", "deduped", "dropped_oldest")
ATTEMPT_OUTCOMES = ("success", "skipped", "transient", "permanent")


class QueueGaugeCollector(Collector):
    """``queue_depth`` (this node's pending/retry_wait jobs), ``dlq_size`` and ``wal_segments`` (file counts)."""

    def collect(self) -> Iterator[Metric]:
        from lessonq.models import Job
        from lessonq.paths import dlq, wal

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
        from lessonq import leader, presence

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
