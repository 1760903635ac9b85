"""Publishing lesson jobs to this node's Celery queue, within capacity (docs/compat/chatcli.md#capacity, docs/compat/chatcli.md#enqueue).

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
from kombu.utils.uuid import uuid

from lessonboard import pauses
from lessonboard.celery import app
from lessonboard.waiting import poll
from lessonq import metrics
from lessonq.models import Job, JobState, NodeLoad

log = logging.getLogger(__name__)

QUEUE_FULL = "queue full: deferred in the WAL until a slot frees (capacity {capacity})"
DROPPED = "dropped_oldest: deferred in the WAL until a slot frees"


# Tasks are sent by name: ``lessonq.tasks`` imports the domain modules, never the other way round.
PROCESS_JOB = "lessonq.tasks.process_job"


def publish(job_id: str, *, countdown: float = 0.0) -> None:
    """Send the message (no DB change). Broker errors are logged: the sweeper re-publishes."""
    try:
        app.send_task(PROCESS_JOB, args=[job_id], queue=settings.LESSONQ_QUEUE, countdown=max(countdown, 0.0) or None)
    except Exception as exc:
        log.warning("lessonq: publishing %s failed (the sweeper will retry): %s", job_id, exc)


def publish_many(items: list[tuple[str, float]]) -> None:
    """Publish many (job id, countdown) messages over one broker connection (replay, sweeps). Broker
    errors are logged: the sweeper re-publishes."""
    try:
        send_batch(items)
    except Exception as exc:
        log.warning("lessonq: publishing %d job(s) failed (the sweeper will retry): %s", len(items), exc)


def send_batch(items: list[tuple[str, float]]) -> None:
    """``process_job`` messages for ``items`` over one producer: Celery's own task message
    (``create_task_message``), published to the node's queue as ``send_task`` would, without its
    per-call routing and declaration (half its cost; the queue is declared once per batch)."""
    queue = app.amqp.queues[settings.LESSONQ_QUEUE]  # created (and remembered) on first use, as send_task does
    with app.producer_or_acquire() as producer:
        producer.maybe_declare(queue)
        for job_id, countdown in items:
            message = app.amqp.create_task_message(
                uuid(), PROCESS_JOB, [job_id], {}, countdown=max(countdown, 0.0) or None, argsrepr=repr([job_id])
            )
            producer.publish(
                message.body,
                exchange=queue.exchange,
                routing_key=queue.routing_key,
                serializer="json",
                headers=message.headers,
                declare=None,
                retry=False,
                **message.properties,
            )


def dispatch_many(jobs: list[Job], *, now: datetime | None = None, redispatch: bool = False) -> int:
    """``dispatch`` for a batch the caller already fitted into the free room: one UPDATE, one connection.
    ``redispatch``: these jobs' messages look lost; count it (the next re-publish backs off).
    Jobs that no longer fit (a concurrent ingest took the room) are un-dispatched again, newest last."""
    now = now or timezone.now()
    if not jobs:
        return 0
    ids = [j.pk for j in jobs]
    reason = pauses.unavailable_reason("lessonq")
    if reason:  # paused, no LLM configured, or the breaker is open: they stay in the WAL, undispatched
        Job.objects.filter(pk__in=ids).update(dispatched_at=None, waiting_reason=reason[:300])
        return 0
    counter = F("redispatches") + 1 if redispatch else Value(0)
    with transaction.atomic():
        Job.objects.filter(pk__in=ids).update(dispatched_at=now, waiting_reason="", redispatches=counter)
        over = in_flight() - settings.LESSONQ_CAPACITY
        if over > 0 and not redispatch:
            jobs, unfit = jobs[:-over], jobs[-over:]
            reason = QUEUE_FULL.format(capacity=settings.LESSONQ_CAPACITY)
            Job.objects.filter(pk__in=[j.pk for j in unfit]).update(dispatched_at=None, waiting_reason=reason)
        items = [
            (j.pk, (j.next_attempt_at - now).total_seconds() if j.state == JobState.RETRY_WAIT else 0.0) for j in jobs
        ]
        transaction.on_commit(lambda: publish_many(items), robust=True)
    return len(jobs)


def in_flight() -> int:
    """This node's jobs dispatched and not finished (``NodeLoad``, kept by the database: no COUNT)."""
    values = NodeLoad.objects.filter(node=settings.LESSONQ_QUEUE).values_list("in_flight", flat=True)[:1]
    return values[0] if values else 0


def room() -> int:
    return settings.LESSONQ_CAPACITY - in_flight()


def admit(job: Job, *, load: int | None = None) -> bool:
    """Inside the transaction that has just marked ``job`` dispatched (so the database counted it and
    holds this node's ``NodeLoad`` row until commit): keep it if the node is within capacity, else make
    room by un-dispatching the oldest waiting job (DropOldest), else un-dispatch ``job`` itself.
    ``load``: the in-flight count the caller has just read in this transaction."""
    if (in_flight() if load is None else load) <= settings.LESSONQ_CAPACITY:
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
    job.mark_waiting(QUEUE_FULL.format(capacity=settings.LESSONQ_CAPACITY))
    return False


def dispatch(job: Job, *, now: datetime | None = None, block: bool = False) -> bool:
    """Mark ``job`` dispatched and publish it after commit, if the LLM is available (configured, breaker
    closed) and there is room.

    ``block``: wait up to LESSONQ_BLOCK_TIMEOUT for room (chatcli's Block policy at enqueue time).
    Returns whether it was dispatched.
    """
    now = now or timezone.now()
    reason = pauses.unavailable_reason("lessonq")[:300]  # paused, no LLM configured, or the breaker is open
    if reason:
        if job.waiting_reason != reason or job.dispatched_at is not None:
            job.mark_waiting(reason)
        return False
    with transaction.atomic():
        was_dispatched = job.dispatched_at is not None
        Job.objects.filter(pk=job.pk).update(dispatched_at=now, waiting_reason="", redispatches=0)
        job.dispatched_at, job.waiting_reason, job.redispatches = now, "", 0
        admitted = was_dispatched or admit(job)
        if admitted:
            publish_after_commit(job, now=now)
    if not admitted and block:
        return wait_for_room(job, now=now)
    return admitted


def publish_after_commit(job: Job, *, now: datetime) -> None:
    countdown = (job.next_attempt_at - now).total_seconds() if job.state == JobState.RETRY_WAIT else 0.0
    transaction.on_commit(lambda: publish(job.pk, countdown=countdown), robust=True)


def wait_for_room(job: Job, *, now: datetime) -> bool:
    """Block policy, after the job was committed undispatched: wait up to LESSONQ_BLOCK_TIMEOUT for a
    slot, then dispatch it; ``rejected_full`` when none frees (the sweeper dispatches it later)."""
    if settings.LESSONQ_BLOCK_TIMEOUT > 0 and not transaction.get_connection().in_atomic_block:
        if poll(lambda: room() > 0, timeout=settings.LESSONQ_BLOCK_TIMEOUT) and dispatch(job, now=now):
            return True
    metrics.ENQUEUE.labels(outcome="rejected_full").inc()
    return False
