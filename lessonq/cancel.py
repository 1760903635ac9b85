"""Cancel a lesson job that is stuck in its attempt (the "Running now" page, docs/operations.md#running-now).

The attempt is recorded as ``cancelled`` and the job moves to the dead-letter queue with who cancelled it
and why, so Retry works on it as on any dead job. The worker still inside the call is not interrupted (its
call ends at ``LESSONBOARD_LLM_TIMEOUT``); whatever it then reports is dropped, because the job no longer
holds its claim (the same fencing as a node adoption)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lessonboard.models import AuditEvent
from lessonq.dlq import DLQError, _check_id
from lessonq.models import AttemptOutcome, Job, JobState
from lessonq.paths import dlq, wal
from lessonq.processing import _record_of


def cancel(job_id: str, *, user: Any = None, token: Any = None, reason: str = "") -> Job:
    job_id = _check_id(job_id)
    who = user.get_username() if user is not None and user.is_authenticated else (token.name if token else "someone")
    error = f"cancelled by {who}" + (f": {reason}" if reason else "")
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.state != JobState.RUNNING:
            raise DLQError(f"job {job_id} is not running")
        if job.node != settings.LESSONQ_QUEUE:
            raise DLQError(f"job {job_id} runs on node {job.node}: its WAL record lives there; cancel it there")
        record = _record_of(job)
        dlq().append(record.with_retry(attempts=job.attempts, next_attempt_at=record.next_attempt_at, last_error=error))
        job.mark_dead(error)  # clears the claim: the worker's late outcome is fenced off
        attempt = job.attempt_rows.filter(finished_at__isnull=True).order_by("-number").first()
        if attempt is not None:
            attempt.finish(AttemptOutcome.CANCELLED, error, now=timezone.now())
        AuditEvent.record(
            "queue.cancel",
            user=user if user is not None and user.is_authenticated else None,
            token=token,
            object_type="job",
            object_ids=[job_id],
            reason=reason[:300],
            result={"cancelled": 1, "attempt": attempt.number if attempt else None},
        )
    wal().ack(job_id)
    return job
