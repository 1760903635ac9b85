"""One attempt at a lesson job (spec §6.4, §7): claim → LLM → classify → record the outcome.

Effect orders (ARCHITECTURE.md), each step crash-safe because the next replay/sweep repairs it:
- success: one transaction (lesson persisted, idempotent per JobID, + job succeeded) → unlink WAL;
- skipped: job skipped → unlink WAL;
- transient: WAL update (attempts, next attempt, error) → row retry_wait → re-publish with countdown;
- dead: DLQ put (idempotent) → row dead → unlink WAL.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lessonboard import llm
from lessonq import faults, generation, gojson, metrics
from lessonq.dispatch import publish
from lessonq.models import ACTIVE, WAITING, AttemptOutcome, Job, JobAttempt, JobState, worker_identity
from lessonq.paths import dlq, wal
from lessonq.retry import policy

log = logging.getLogger(__name__)
_rng = random.Random()

WORKER_LOST = "worker lost mid-attempt (killed, crashed or timed out); attempts exhausted"


@dataclass(frozen=True)
class Outcome:
    kind: str  # success | skipped | transient | permanent
    error: str = ""
    lesson: generation.GeneratedLesson | None = None


def classify(exc: BaseException) -> Outcome:
    """§7 plus the gateway's classes: parser errors and permanent provider errors → permanent; timeouts,
    network, 429/5xx, garbled bodies → transient; anything unexpected → permanent (chatcli's panic rule)."""
    if isinstance(exc, generation.LessonParseError):
        return Outcome("permanent", str(exc))
    if isinstance(exc, llm.TransientLLMError):
        return Outcome("transient", exc.message)
    if isinstance(exc, llm.PermanentLLMError):
        return Outcome("permanent", exc.message)
    message = str(exc).lower()
    if any(s in message for s in ("no recognized blocks", "missing required blocks", "unsupported record version")):
        return Outcome("permanent", str(exc))
    return Outcome("permanent", f"processor panic: {exc}")


def process(job_id: str) -> str:
    """Run one attempt of ``job_id`` if it is due and ours; returns what happened (for logs and tests)."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return "unknown"
    if job.node != settings.LESSONQ_QUEUE:
        return "other-node"
    if job.state not in ACTIVE:
        return "finished"
    if job.state in WAITING and job.dispatched_at is None:
        return "not-dispatched"  # deferred (capacity, no LLM) or dropped; the sweeper dispatches it
    if not llm.is_configured():
        if job.state in WAITING:
            job.mark_waiting(llm.status_text())
        return "waiting-for-llm"
    reclaimed = job.state == JobState.RUNNING
    if not job.claim(timeout=settings.LESSONQ_JOB_TIMEOUT):
        return "not-claimed"
    faults.point("process.after_claim")
    if dlq().exists(job.id):
        if reclaimed:
            # The lost attempt got as far as the DLQ put before dying: finish that move.
            finish_dead(job, job.last_error or WORKER_LOST)
            return "dead"
        # A DLQ retry committed the job back to pending but died before removing the DLQ record.
        dlq().ack(job.id)
    if not wal().exists(job.id):
        wal().append(job.wal_job())  # rows → files: the row is authoritative for a running job
    if job.attempts > policy().max_attempts:
        finish_dead(job, WORKER_LOST)
        return "dead"
    return run_attempt(job)


def run_attempt(job: Job) -> str:
    started = timezone.now()
    clock = time.monotonic()
    # ``number`` counts every try of the job, across DLQ retries (which reset ``job.attempts``, as chatcli).
    last = JobAttempt.objects.filter(job=job).order_by("-number").values_list("number", flat=True).first() or 0
    attempt = JobAttempt.objects.create(job=job, number=last + 1, worker=worker_identity(), started_at=started)
    try:
        lesson = generation.generate(
            task=job.task,
            attempt=job.output,
            outcome=job.outcome,
            trigger=job.trigger,
            timeout=settings.LESSONQ_JOB_TIMEOUT,
        )
        outcome = Outcome("success", lesson=lesson) if lesson is not None else Outcome("skipped")
    except Exception as exc:
        outcome = classify(exc)
    if outcome.kind == "success":
        assert outcome.lesson is not None
        try:
            succeed(job, attempt, outcome.lesson)
        except Exception as exc:  # persist errors are transient (chatcli §7)
            log.exception("lessonq: persisting the lesson of %s failed", job.id)
            metrics.PERSIST_FAILURES.inc()
            outcome = Outcome("transient", f"persist: {exc}")
    if outcome.kind == "skipped":
        with transaction.atomic():
            job.mark_skipped()
            attempt.finish(AttemptOutcome.SKIPPED)
        faults.point("skipped.after_row")
        wal().ack(job.id)
    elif outcome.kind == "transient":
        retry_or_dead(job, attempt, outcome.error)
    elif outcome.kind == "permanent":
        finish_dead(job, outcome.error, attempt=attempt)
    duration = time.monotonic() - clock
    metrics.ATTEMPTS.labels(outcome=outcome.kind).inc()
    metrics.PROCESSING_DURATION.labels(outcome=outcome.kind).observe(duration)
    return outcome.kind


def succeed(job: Job, attempt: JobAttempt, lesson: generation.GeneratedLesson) -> None:
    from lessons.content import lesson_tags
    from lessons.store import persist_lesson

    with transaction.atomic():
        result = persist_lesson(
            situation=lesson.situation,
            mistake=lesson.mistake,
            correction=lesson.correction,
            tags=lesson_tags(lesson.tags, lesson.trigger),
            trigger=lesson.trigger,
            workspace=job.workspace,
            agent=job.agent,
            source_job_id=job.id,
            actor=f"job:{job.id}",
        )
        job.mark_succeeded(result.lesson.pk)
        attempt.finish(AttemptOutcome.SUCCESS)
    faults.point("success.after_commit")
    wal().ack(job.id)


def retry_or_dead(job: Job, attempt: JobAttempt, error: str) -> None:
    retry = policy()
    if not retry.should_retry(job.attempts):
        finish_dead(job, error, attempt=attempt, attempt_outcome=AttemptOutcome.TRANSIENT)
        return
    delay = retry.delay(job.attempts, _rng)
    now = timezone.now()
    next_at = now + timedelta(seconds=delay)
    with transaction.atomic():
        Job.objects.select_for_update().filter(pk=job.pk).first()
        wal().update(
            job.wal_job().with_retry(attempts=job.attempts, next_attempt_at=gojson.local(next_at), last_error=error)
        )
        faults.point("transient.after_wal")
        job.mark_retry_wait(next_attempt_at=next_at, error=error)
        Job.objects.filter(pk=job.pk).update(dispatched_at=now)
        attempt.finish(AttemptOutcome.TRANSIENT, error)
    metrics.RETRIES.labels(attempt=str(job.attempts)).inc()
    faults.point("transient.after_row")
    publish(job.pk, countdown=delay)


def finish_dead(
    job: Job,
    error: str,
    *,
    attempt: JobAttempt | None = None,
    attempt_outcome: str = AttemptOutcome.PERMANENT,
) -> None:
    """DLQ put (idempotent: an existing DLQ record is kept, as chatcli) → row dead → unlink WAL."""
    with transaction.atomic():
        Job.objects.select_for_update().filter(pk=job.pk).first()
        record = job.wal_job()
        dlq().append(record.with_retry(attempts=job.attempts, next_attempt_at=record.next_attempt_at, last_error=error))
        faults.point("dead.after_dlq")
        job.mark_dead(error)
        if attempt is not None:
            attempt.finish(attempt_outcome, error)
    faults.point("dead.after_row")
    wal().ack(job.id)
