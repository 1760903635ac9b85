"""The ten ``chatcli_lessonq_*`` series (docs/compat/chatcli.md#metrics), with chatcli's names, types, labels and buckets.

Counters and the histogram are ordinary multiprocess-safe prometheus_client metrics; they import nothing
of the queue, so any queue module may count. The three gauges are computed at scrape time by
``lessonq.gauges.QueueGaugeCollector``, which reads the WAL and the database.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

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
