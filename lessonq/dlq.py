"""Dead-letter operations (spec §4.5, §6.7) for the CLI and the triage pages: list, retry, purge, and
their bulk forms. Each is crash-safe in the order of ARCHITECTURE.md and audited.

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

from lessonboard.models import AuditEvent
from lessonq import faults, gojson
from lessonq.dispatch import dispatch, publish
from lessonq.jobid import go_trim, is_job_id
from lessonq.models import Job, JobQuerySet, JobState
from lessonq.paths import dlq, wal


class DLQError(Exception):
    pass


def dead_jobs() -> JobQuerySet:
    """Dead jobs, newest first (all nodes; their DLQ records live on ``job.node``)."""
    return Job.objects.dead().order_by("-finished_at", "-enqueued_at")


@dataclass
class BulkResult:
    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def _check_id(job_id: str) -> str:
    job_id = go_trim(job_id).lower()
    if not is_job_id(job_id):
        raise DLQError(f"invalid job id {job_id!r}: a job id is 16 hex characters")
    return job_id


def retry(job_id: str, *, user: Any = None, actor: str = "", reason: str = "") -> Job:
    """Move a dead job back to the active queue: attempts reset, error cleared, due now, ``enqueued_at``
    kept (so an old job can still expire at the next boot, as chatcli). Raises ``DLQError``
    (``lessonq runner: dlq entry <id> not found``)."""
    job_id = _check_id(job_id)
    job = Job.objects.filter(pk=job_id).first()
    if job is not None and job.node != settings.LESSONQ_QUEUE:
        from lessonq.tasks import retry_dead

        retry_dead.apply_async(args=[job_id], queue=job.node)
        _audit("queue.dlq_retry", [job_id], user=user, actor=actor, reason=reason, result=f"sent to {job.node}")
        return job
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        record = dlq().read(job_id)
        if record is None or job is None or job.state != JobState.DEAD:
            raise DLQError(f"lessonq runner: dlq entry {job_id} not found")
        now = timezone.now()
        wal().append(record.with_retry(attempts=0, next_attempt_at=gojson.local(now), last_error=""))
        faults.point("retry.after_wal")
        job.mark_pending_again(now=now)
        dispatched = dispatch(job, now=now)
    faults.point("retry.after_row")
    dlq().ack(job_id)
    _audit(
        "queue.dlq_retry",
        [job_id],
        user=user,
        actor=actor,
        reason=reason,
        result="dispatched" if dispatched else "pending",
    )
    return job


def purge(job_id: str, *, user: Any = None, actor: str = "", reason: str = "") -> None:
    """Delete a DLQ entry for good (the row stays, state ``purged``). An unknown id succeeds, as chatcli."""
    job_id = _check_id(job_id)
    job = Job.objects.filter(pk=job_id).first()
    if job is not None and job.node != settings.LESSONQ_QUEUE:
        from lessonq.tasks import purge_dead

        purge_dead.apply_async(args=[job_id], queue=job.node)
        _audit("queue.dlq_purge", [job_id], user=user, actor=actor, reason=reason, result=f"sent to {job.node}")
        return
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is not None and job.state == JobState.DEAD:
            job.mark_purged()
    dlq().ack(job_id)
    _audit("queue.dlq_purge", [job_id], user=user, actor=actor, reason=reason, result="purged")


def retry_many(job_ids: Iterable[str], **kwargs: Any) -> BulkResult:
    result = BulkResult()
    for job_id in job_ids:
        try:
            retry(job_id, **kwargs)
            result.done.append(job_id)
        except DLQError as exc:
            result.failed[job_id] = str(exc)
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


def retry_matching(jobs: JobQuerySet, **kwargs: Any) -> BulkResult:
    """Bulk retry of a filtered selection (e.g. the triage page's filter)."""
    return retry_many(list(jobs.dead().values_list("pk", flat=True)), **kwargs)


def purge_matching(jobs: JobQuerySet, **kwargs: Any) -> BulkResult:
    return purge_many(list(jobs.dead().values_list("pk", flat=True)), **kwargs)


def _audit(action: str, ids: list[str], *, user: Any, actor: str, reason: str, result: str) -> None:
    AuditEvent.record(
        action,
        user=user if user is not None and getattr(user, "is_authenticated", False) else None,
        object_type="queue.job",
        object_ids=ids,
        result={"outcome": result, **({"actor": actor} if actor else {})},
        reason=reason,
    )


__all__ = ["BulkResult", "DLQError", "dead_jobs", "publish", "purge", "purge_many", "retry", "retry_many"]
