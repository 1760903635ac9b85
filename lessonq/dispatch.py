"""Publishing lesson jobs to this node's Celery queue, within capacity (spec §5, §6.3).

Capacity bounds jobs *dispatched and not finished* on a node (rows with ``dispatched_at`` set in an
active state). A job without room stays in the WAL, undispatched (``dispatched_at`` NULL) with the reason
in ``waiting_reason``; the sweeper dispatches it when room frees. Nothing accepted is ever dropped:
"DropOldest" only un-dispatches the oldest waiting job (its WAL record stays), as chatcli evicts from
memory only.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F, Value
from django.utils import timezone

from lessonboard import llm
from lessonq import metrics
from lessonq.models import Job, JobState

log = logging.getLogger(__name__)

QUEUE_FULL = "queue full: deferred in the WAL until a slot frees (capacity {capacity})"
DROPPED = "dropped_oldest: deferred in the WAL until a slot frees"


def publish(job_id: str, *, countdown: float = 0.0) -> None:
    """Send the message (no DB change). Broker errors are logged: the sweeper re-publishes."""
    from lessonq.tasks import process_job

    try:
        process_job.apply_async(args=[job_id], queue=settings.LESSONQ_QUEUE, countdown=max(countdown, 0.0) or None)
    except Exception as exc:
        log.warning("lessonq: publishing %s failed (the sweeper will retry): %s", job_id, exc)


def publish_many(items: list[tuple[str, float]]) -> None:
    """Publish many (job id, countdown) messages over one broker connection (replay, sweeps)."""
    from lessonboard.celery import app
    from lessonq.tasks import process_job

    try:
        with app.producer_or_acquire() as producer:
            for job_id, countdown in items:
                process_job.apply_async(
                    args=[job_id],
                    queue=settings.LESSONQ_QUEUE,
                    countdown=max(countdown, 0.0) or None,
                    producer=producer,
                )
    except Exception as exc:
        log.warning("lessonq: publishing %d job(s) failed (the sweeper will retry): %s", len(items), exc)


def dispatch_many(jobs: list[Job], *, now: datetime | None = None, redispatch: bool = False) -> int:
    """``dispatch`` for a batch the caller already fitted into the free room: one UPDATE, one connection.
    ``redispatch``: these jobs' messages look lost; count it (the next re-publish backs off)."""
    now = now or timezone.now()
    if not jobs:
        return 0
    ids = [j.pk for j in jobs]
    if not llm.is_configured():
        Job.objects.filter(pk__in=ids).update(dispatched_at=None, waiting_reason=llm.status_text())
        return 0
    counter = F("redispatches") + 1 if redispatch else Value(0)
    Job.objects.filter(pk__in=ids).update(dispatched_at=now, waiting_reason="", redispatches=counter)
    items = [(j.pk, (j.next_attempt_at - now).total_seconds() if j.state == JobState.RETRY_WAIT else 0.0) for j in jobs]
    transaction.on_commit(lambda: publish_many(items), robust=True)
    return len(jobs)


def room() -> int:
    return settings.LESSONQ_CAPACITY - Job.objects.for_this_node().in_flight().count()


def dispatch(job: Job, *, now: datetime | None = None, block: bool = False) -> bool:
    """Mark ``job`` dispatched and publish it after commit, if an LLM is configured and there is room.

    ``block``: wait up to LESSONQ_BLOCK_TIMEOUT for room (chatcli's Block policy at enqueue time).
    Returns whether it was dispatched.
    """
    now = now or timezone.now()
    if not llm.is_configured():
        reason = llm.status_text()
        if job.waiting_reason != reason or job.dispatched_at is not None:
            job.mark_waiting(reason)
        return False
    if job.dispatched_at is None and not _make_room(job, block=block):
        reason = QUEUE_FULL.format(capacity=settings.LESSONQ_CAPACITY)
        if job.waiting_reason != reason:
            job.mark_waiting(reason)
        return False
    Job.objects.filter(pk=job.pk).update(dispatched_at=now, waiting_reason="", redispatches=0)
    job.dispatched_at, job.waiting_reason, job.redispatches = now, "", 0
    countdown = (job.next_attempt_at - now).total_seconds() if job.state == JobState.RETRY_WAIT else 0.0
    transaction.on_commit(lambda: publish(job.pk, countdown=countdown), robust=True)
    return True


def _make_room(job: Job, *, block: bool) -> bool:
    if room() > 0:
        return True
    if settings.LESSONQ_DROP_OLDEST:
        oldest = (
            Job.objects.for_this_node()
            .waiting()
            .filter(dispatched_at__isnull=False)
            .exclude(pk=job.pk)
            .order_by("enqueued_at")
            .first()
        )
        if oldest is not None:
            oldest.mark_waiting(DROPPED)
            metrics.ENQUEUE.labels(outcome="dropped_oldest").inc()
            return True
        return False
    if block and settings.LESSONQ_BLOCK_TIMEOUT > 0 and not transaction.get_connection().in_atomic_block:
        from lessonq.waiting import poll

        if poll(lambda: room() > 0, timeout=settings.LESSONQ_BLOCK_TIMEOUT):
            return True
    if block:
        metrics.ENQUEUE.labels(outcome="rejected_full").inc()
    return False
