"""Dead-letter operations (docs/compat/chatcli.md#dlq, docs/compat/chatcli.md#dlq-retry) for the CLI and the triage pages: list, retry, purge, and
their bulk forms. Each is crash-safe in the order of docs/architecture.md#order-of-effects and audited.

Unlike chatcli, retry writes the active record *before* removing the DLQ one (chatcli removes first and
a failing append loses the job), and job ids are validated before they become file names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lessonboard.celery import app
from lessonboard.inputs import unstorable_reason
from lessonboard.models import AuditEvent
from lessonq import faults, gojson
from lessonq.dispatch import dispatch, dispatch_many, publish, room
from lessonq.jobid import go_trim, is_job_id
from lessonq.models import Job, JobQuerySet, JobState
from lessonq.paths import dlq, wal
from lessonq.wal import WalJob


class DLQError(Exception):
    pass


def dead_jobs() -> JobQuerySet:
    """Dead jobs, newest first (all nodes; their DLQ records live on ``job.node``)."""
    return Job.objects.dead().order_by("-finished_at", "-enqueued_at")


@dataclass
class BulkResult:
    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    sent: dict[str, str] = field(default_factory=dict)  # job id → the node it was sent to (retry_many)


def _check_id(job_id: str) -> str:
    job_id = go_trim(job_id).lower()
    if not is_job_id(job_id):
        raise DLQError(f"invalid job id {job_id!r}: a job id is 16 hex characters")
    return job_id


def _check_reason(reason: str) -> str:
    """Validated before the action, so a reason that cannot be stored never leaves an unaudited action."""
    problem = unstorable_reason(reason)
    if problem is not None:
        raise DLQError(f"the reason {problem}")
    return reason


def retry(job_id: str, *, user: Any = None, actor: str = "", reason: str = "") -> Job:
    """Move a dead job back to the active queue: attempts reset, error cleared, due now, ``enqueued_at``
    kept (so an old job can still expire at the next boot, as chatcli). Raises ``DLQError``
    (``lessonq runner: dlq entry <id> not found``)."""
    job_id = _check_id(job_id)
    reason = _check_reason(reason)
    job = Job.objects.filter(pk=job_id).first()
    if job is not None and job.node != settings.LESSONQ_QUEUE:
        app.send_task("lessonq.tasks.retry_dead", args=[job_id], queue=job.node)
        _audit("queue.dlq_retry", [job_id], user=user, actor=actor, reason=reason, result=f"sent to {job.node}")
        return job
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        record = dlq().read(job_id)
        if record is None or job is None or job.state != JobState.DEAD:
            raise DLQError(f"lessonq runner: dlq entry {job_id} not found")
        now = timezone.now()
        try:
            wal().append(record.with_retry(attempts=0, next_attempt_at=gojson.local(now), last_error=""))
        except OSError as exc:  # disk full, permissions: the job stays dead, nothing changed
            raise DLQError(f"cannot write the WAL record of {job_id}: {exc.strerror or exc}") from exc
        faults.point("retry.after_wal")
        job.mark_pending_again(now=now)
        dispatched = dispatch(job, now=now)
        # The action and its audit event commit together: no retry without its event, and no event
        # for a retry that rolled back.
        _audit(
            "queue.dlq_retry",
            [job_id],
            user=user,
            actor=actor,
            reason=reason,
            result="dispatched" if dispatched else "pending",
        )
    faults.point("retry.after_row")
    dlq().ack(job_id)
    return job


def purge(job_id: str, *, user: Any = None, actor: str = "", reason: str = "") -> None:
    """Delete a DLQ entry for good (the row stays, state ``purged``). An unknown id succeeds, as chatcli."""
    job_id = _check_id(job_id)
    reason = _check_reason(reason)
    job = Job.objects.filter(pk=job_id).first()
    if job is not None and job.node != settings.LESSONQ_QUEUE:
        app.send_task("lessonq.tasks.purge_dead", args=[job_id], queue=job.node)
        _audit("queue.dlq_purge", [job_id], user=user, actor=actor, reason=reason, result=f"sent to {job.node}")
        return
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is not None and job.state == JobState.DEAD:
            job.mark_purged()
        _audit("queue.dlq_purge", [job_id], user=user, actor=actor, reason=reason, result="purged")
    dlq().ack(job_id)


def retry_many(job_ids: Iterable[str], *, user: Any = None, actor: str = "", reason: str = "") -> BulkResult:
    """Retry many dead jobs at disk speed, with ``retry``'s effect order for the whole batch: lock the
    rows, write every active WAL record (each fsynced, one directory fsync), one UPDATE puts the rows
    back to pending, dispatch within capacity, commit, then remove the DLQ records (one directory
    fsync). Jobs of other nodes are sent to their node one by one. One audit event for the batch."""
    result = BulkResult()
    ids: list[str] = []
    for raw in job_ids:
        try:
            ids.append(_check_id(raw))
        except DLQError as exc:
            result.failed[raw] = str(exc)
    ids = list(dict.fromkeys(ids))
    now = timezone.now()
    dead_letters = dlq()
    retried: list[str] = []
    with transaction.atomic():
        jobs = {j.pk: j for j in Job.objects.select_for_update().filter(pk__in=ids)}
        records: list[WalJob] = []
        for job_id in ids:
            job = jobs.get(job_id)
            if job is not None and job.node != settings.LESSONQ_QUEUE:
                app.send_task("lessonq.tasks.retry_dead", args=[job_id], queue=job.node)
                result.sent[job_id] = job.node
                continue
            record = dead_letters.read(job_id) if job is not None and job.state == JobState.DEAD else None
            if record is None:
                result.failed[job_id] = f"lessonq runner: dlq entry {job_id} not found"
                continue
            records.append(record.with_retry(attempts=0, next_attempt_at=gojson.local(now), last_error=""))
        wal().append_many(records)  # durable before any row says "pending"
        faults.point("retry.after_wal")
        retried = [r.id for r in records]
        Job.objects.filter(pk__in=retried).update(
            state=JobState.PENDING,
            attempts=0,
            last_error="",
            next_attempt_at=now,
            finished_at=None,
            dispatched_at=None,
            updated_at=now,
        )
        waiting = list(Job.objects.filter(pk__in=retried).order_by("enqueued_at")[: max(room(), 0)])
        dispatched = dispatch_many(waiting, now=now)
    faults.point("retry.after_row")
    dead_letters.ack_many(retried)
    result.done.extend(retried)
    if retried:
        _audit(
            "queue.dlq_retry",
            retried,
            user=user,
            actor=actor,
            reason=reason,
            result=f"{dispatched} dispatched, {len(retried) - dispatched} pending",
        )
    return result


def purge_many(job_ids: Iterable[str], **kwargs: Any) -> BulkResult:
    result = BulkResult()
    for job_id in job_ids:
        try:
            purge(job_id, **kwargs)
            result.done.append(job_id)
        except DLQError as exc:
            result.failed[job_id] = str(exc)
    return result


def purge_matching(jobs: JobQuerySet, **kwargs: Any) -> BulkResult:
    return purge_many(list(jobs.dead().values_list("pk", flat=True)), **kwargs)


def retry_now(job_id: str, *, user: Any = None, actor: str = "", reason: str = "") -> Job:
    """Bring a job that waits to retry forward: due now in its WAL record and row, published at once. The
    delayed message still queued later finds the job finished or not yet due again, and does nothing.
    Raises ``DLQError`` for a job that is not waiting to retry (or lives on another node)."""
    job_id = _check_id(job_id)
    now = timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.state != JobState.RETRY_WAIT:
            raise DLQError(f"job {job_id} is not waiting to retry")
        if job.node != settings.LESSONQ_QUEUE:
            raise DLQError(f"job {job_id} waits on node {job.node}: its WAL record lives there")
        record = job.wal_job()
        wal().update(
            record.with_retry(attempts=job.attempts, next_attempt_at=gojson.local(now), last_error=job.last_error)
        )
        Job.objects.filter(pk=job.pk).update(next_attempt_at=now, dispatched_at=now, updated_at=now)
        transaction.on_commit(lambda: publish(job_id))
    _audit("queue.retry_now", [job_id], user=user, actor=actor, reason=reason, result="due now")
    job.refresh_from_db()
    return job


def _audit(action: str, ids: list[str], *, user: Any, actor: str, reason: str, result: str) -> None:
    AuditEvent.record(
        action,
        user=user if user is not None and getattr(user, "is_authenticated", False) else None,
        object_type="queue.job",
        object_ids=ids,
        result={"outcome": result, **({"actor": actor} if actor else {})},
        reason=reason,
    )


__all__ = [
    "BulkResult",
    "DLQError",
    "dead_jobs",
    "publish",
    "purge",
    "purge_many",
    "retry",
    "retry_many",
    "retry_now",
]
