"""One attempt at a lesson job (docs/compat/chatcli.md#processing, docs/compat/chatcli.md#error-classes): claim → LLM → classify → record the outcome.

Effect orders (docs/architecture.md#order-of-effects), each step crash-safe because the next replay/sweep repairs it:
- success: one transaction (lesson persisted, idempotent per JobID, + job succeeded) → unlink WAL;
- skipped: job skipped → unlink WAL;
- transient: WAL update (attempts, next attempt, error) → row retry_wait → re-publish with countdown;
- LLM outage (the breaker is open, docs/operations.md#llm-outage): the attempt is given back and the job
  waits undispatched, as with no LLM configured; the sweeper dispatches it once the breaker closes;
- LLM rate limit (a 429, or the pause it started, docs/operations.md#llm-rate-limit): the attempt is given
  back and the job is due again when the pause ends (WAL next attempt → row → message with countdown);
- dead: DLQ put (idempotent) → row dead → unlink WAL.
"""

from __future__ import annotations

import logging
import os
import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from lessonboard import llm, pauses
from lessonq import faults, generation, gojson, metrics
from lessonq.dispatch import publish
from lessonq.failover import Fenced, ensure_ours
from lessonq.models import (
    ACTIVE,
    WAITING,
    AttemptOutcome,
    Job,
    JobAttempt,
    JobState,
    claim_expiry,
    worker_identity,
)
from lessonq.paths import base, dlq, expired_dir, wal
from lessonq.retry import policy
from lessonq.wal import WalError, WalJob

log = logging.getLogger(__name__)
_rng = random.Random()

WORKER_LOST = "worker lost mid-attempt (killed, crashed or timed out); attempts exhausted"


@dataclass(frozen=True)
class Outcome:
    kind: str  # success | skipped | transient | permanent
    error: str = ""
    lesson: generation.GeneratedLesson | None = None
    reply: str = ""  # the model's reply the parser refused (kept on the attempt for the dead-job page)


def classify(exc: BaseException) -> Outcome:
    """docs/compat/chatcli.md#error-classes plus the gateway's classes: parser errors and permanent provider errors → permanent; timeouts,
    network, 429/5xx, garbled bodies → transient; anything unexpected → permanent (chatcli's panic rule)."""
    if isinstance(exc, generation.LessonParseError):
        return Outcome("permanent", str(exc), reply=exc.reply)
    if isinstance(exc, llm.TransientLLMError):
        return Outcome("transient", exc.message)
    if isinstance(exc, llm.PermanentLLMError):
        return Outcome("permanent", exc.message)
    message = str(exc).lower()
    if any(s in message for s in ("no recognized blocks", "missing required blocks", "unsupported record version")):
        return Outcome("permanent", str(exc))
    return Outcome("permanent", f"processor panic: {exc}")


def process(job_id: str) -> str:
    """Run one attempt of ``job_id`` if it is due and ours; returns what happened (for logs and tests).

    The common case — a dispatched job of this node, due, the LLM available — is claimed with its
    attempt row in one statement (``claim_due``); anything else (a finished or unknown job, a reclaim of
    a lost attempt, an LLM outage) takes the path that reads the row first and says why."""
    reason, pause = llm.availability()
    reason = (pauses.reason("lessonq") or reason)[:300]  # an operator's pause first
    if pause is not None and not reason:
        waited = wait_out_pause(job_id, pause)
        if waited:
            return waited
    elif not reason:
        claimed = claim_due(job_id)
        if claimed is not None:
            job, attempt = claimed
            faults.point("process.after_claim")
            try:
                return attempt_claimed(job, reclaimed=False, attempt=attempt)
            except Fenced as exc:
                return fenced(job, exc)
    return process_read_first(job_id, reason)


# The fast claim: the conditions of ``Job.claim`` for a waiting job plus "dispatched", and the attempt
# row (numbered as START_ATTEMPT_SQL does) in the same statement; none when the job is already past its
# last attempt (``attempt_claimed`` moves it to the DLQ without running it).
CLAIM_DUE_SQL = """
WITH claimed AS (
  UPDATE queue_job SET state = %(running)s, attempts = attempts + 1, claimed_by = %(worker)s,
    claim_expires_at = %(expires)s, waiting_reason = '', updated_at = %(now)s
  WHERE id = %(job)s AND node = %(node)s AND state = ANY(%(waiting)s) AND next_attempt_at <= %(now)s
    AND dispatched_at IS NOT NULL
  RETURNING queue_job.*
), attempt AS (
  INSERT INTO queue_jobattempt (job_id, number, worker, started_at, outcome, error)
  SELECT id, (SELECT COALESCE(MAX(number), 0) + 1 FROM queue_jobattempt WHERE job_id = %(job)s),
    %(worker)s, %(now)s, '', ''
  FROM claimed WHERE attempts <= %(max_attempts)s
  RETURNING id, number
)
SELECT claimed.*, attempt.id AS attempt_id, attempt.number AS attempt_number FROM claimed LEFT JOIN attempt ON true
"""


def claim_due(job_id: str) -> tuple[Job, JobAttempt | None] | None:
    """Claim a dispatched, due, waiting job of this node and start its attempt, in one statement;
    ``None`` when it is not one (the caller reads the row to find out why)."""
    now = timezone.now()
    worker = worker_identity()
    params = {
        "running": JobState.RUNNING.value,
        "worker": worker,
        "expires": claim_expiry(now, settings.LESSONQ_JOB_TIMEOUT),
        "now": now,
        "job": job_id,
        "node": settings.LESSONQ_QUEUE,
        "waiting": list(WAITING),
        "max_attempts": policy().max_attempts,
    }
    job = next(iter(Job.objects.raw(CLAIM_DUE_SQL, params)), None)
    if job is None:
        return None
    attempt_id, number = job.attempt_id, job.attempt_number  # type: ignore[attr-defined]
    if attempt_id is None:
        return job, None
    attempt = JobAttempt(id=attempt_id, job=job, number=number, worker=worker, started_at=now)
    attempt._state.adding, attempt._state.db = False, connection.alias
    return job, attempt


def process_read_first(job_id: str, reason: str) -> str:
    """``process`` for a job the fast claim did not take; ``reason``: why the LLM is unavailable ("")."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return "unknown"
    if job.node != settings.LESSONQ_QUEUE:
        return "other-node"
    if job.state not in ACTIVE:
        return "finished"
    if job.state in WAITING and job.dispatched_at is None:
        return "not-dispatched"  # deferred (capacity, no LLM) or dropped; the sweeper dispatches it
    if reason:  # no LLM configured, or the breaker is open: wait without spending an attempt
        if job.state in WAITING:
            job.mark_waiting(reason)
        return "waiting-for-llm"
    reclaimed = job.state == JobState.RUNNING
    if not job.claim(timeout=settings.LESSONQ_JOB_TIMEOUT):
        return "not-claimed"
    faults.point("process.after_claim")
    try:
        return attempt_claimed(job, reclaimed=reclaimed)
    except Fenced as exc:
        return fenced(job, exc)


def attempt_claimed(job: Job, *, reclaimed: bool, attempt: JobAttempt | None = None) -> str:
    """The claimed job's checks before it runs; ``attempt``: its attempt row when the claim started it."""
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
    return run_attempt(job, attempt)


def fenced(job: Job, exc: Fenced) -> str:
    """Another node adopted the job while this worker had it (docs/architecture.md#node-failover): nothing
    of this attempt is recorded, and the local record leaves this node's WAL (kept aside in expired/,
    never replayed); the adopter holds the job under the same JobID."""
    log.warning("lessonq: %s", exc)
    if not Job.objects.filter(pk=job.pk, node=settings.LESSONQ_QUEUE).exists():
        wal().move_to(job.id, expired_dir())
    return "fenced"


def run_attempt(job: Job, attempt: JobAttempt | None = None) -> str:
    clock = time.monotonic()
    if attempt is None:
        attempt = start_attempt(job, timezone.now())
    from lessonboard.llm import usage

    try:
        with usage.context(
            purpose="lesson",
            workspace=job.workspace.slug if job.workspace is not None else "",
            agent=job.agent,
            prompt=generation.LESSON_PROMPT.name,
            version=generation.PROMPT_VERSION,
            job_id=job.id,
        ):
            lesson = generation.generate(
                task=job.task,
                attempt=job.output,
                outcome=job.outcome,
                trigger=job.trigger,
                timeout=settings.LESSONQ_JOB_TIMEOUT,
            )
        outcome = Outcome("success", lesson=lesson) if lesson is not None else Outcome("skipped")
    except llm.LLMRateLimited as exc:
        # Not this job's fault: every call to the endpoint pauses, and this attempt does not count.
        defer_for_rate_limit(job, attempt, exc)
        metrics.ATTEMPTS.labels(outcome="transient").inc()
        return "rate-limited"
    except llm.LLMError as exc:
        if exc.outage and llm.unavailable_reason():
            # Not this job's fault and the breaker is open now (this error may have opened it).
            defer_for_llm(job, attempt, exc.message)
            metrics.ATTEMPTS.labels(outcome="transient").inc()
            return "waiting-for-llm"
        outcome = classify(exc)
    except Exception as exc:
        outcome = classify(exc)
    if outcome.kind == "success":
        assert outcome.lesson is not None
        try:
            succeed(job, attempt, outcome.lesson)
        except Fenced:
            raise
        except Exception as exc:  # persist errors are transient (docs/compat/chatcli.md#error-classes)
            log.exception("lessonq: persisting the lesson of %s failed", job.id)
            metrics.PERSIST_FAILURES.inc()
            outcome = Outcome("transient", f"persist: {exc}")
    if outcome.kind == "skipped":
        with transaction.atomic():
            ensure_ours(job)
            job.mark_skipped()
            attempt.finish(AttemptOutcome.SKIPPED)
        faults.point("skipped.after_row")
        wal().ack(job.id)
    elif outcome.kind == "transient":
        retry_or_dead(job, attempt, outcome.error)
    elif outcome.kind == "permanent":
        finish_dead(job, outcome.error, attempt=attempt, reply=outcome.reply)
    duration = time.monotonic() - clock
    metrics.ATTEMPTS.labels(outcome=outcome.kind).inc()
    metrics.PROCESSING_DURATION.labels(outcome=outcome.kind).observe(duration)
    return outcome.kind


# ``number`` counts every try of the job, across DLQ retries (which reset ``job.attempts``, as chatcli):
# the next number and the row in one statement (the claim makes this worker the job's only writer).
START_ATTEMPT_SQL = """
INSERT INTO queue_jobattempt (job_id, number, worker, started_at, outcome, error)
SELECT %(job)s, COALESCE(MAX(number), 0) + 1, %(worker)s, %(started)s, '', ''
FROM queue_jobattempt WHERE job_id = %(job)s
RETURNING id, number
"""


def start_attempt(job: Job, started: datetime) -> JobAttempt:
    worker = worker_identity()
    with connection.cursor() as cursor:
        cursor.execute(START_ATTEMPT_SQL, {"job": job.pk, "worker": worker, "started": started})
        pk, number = cursor.fetchone()
    attempt = JobAttempt(id=pk, job=job, number=number, worker=worker, started_at=started)
    attempt._state.adding, attempt._state.db = False, connection.alias
    return attempt


# The success's job and attempt rows, fenced (the row must still name this node and this worker's
# claim, as ``ensure_ours`` checks): one statement, whose count of job rows says whether it was ours.
FINISH_SUCCESS_SQL = """
WITH done AS (
  UPDATE queue_job SET state = %(succeeded)s, lesson_id = %(lesson)s, finished_at = %(now)s, claimed_by = '',
    claim_expires_at = NULL, updated_at = %(now)s
  WHERE id = %(job)s AND node = %(node)s AND claimed_by = %(worker)s
  RETURNING id
), attempt AS (
  UPDATE queue_jobattempt SET finished_at = %(now)s, outcome = %(outcome)s, error = '', duration = %(duration)s
  WHERE id = %(attempt)s AND EXISTS (SELECT 1 FROM done)
  RETURNING id
)
SELECT count(*) FROM done
"""


def succeed(job: Job, attempt: JobAttempt, lesson: generation.GeneratedLesson) -> None:
    """Lesson persisted + job succeeded + attempt finished in one transaction, then the WAL unlink.
    The fencing check is the transaction's last statement, the job's update itself: when the job was
    adopted meanwhile it matches nothing, ``Fenced`` rolls the lesson back and the adopter saves it."""
    from lessons.content import lesson_tags
    from lessons.store import persist_in_transaction

    with transaction.atomic():
        result = persist_in_transaction(
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
        finish_succeeded(job, attempt, result.lesson.pk)
    faults.point("success.after_commit")
    wal().ack(job.id)
    if result.action == "created":
        append_lessons_md(result.lesson)


def finish_succeeded(job: Job, attempt: JobAttempt, lesson_id: int) -> None:
    now = timezone.now()
    duration = (now - attempt.started_at).total_seconds()
    params: dict[str, Any] = {
        "succeeded": JobState.SUCCEEDED.value,
        "lesson": lesson_id,
        "now": now,
        "job": job.pk,
        "node": settings.LESSONQ_QUEUE,
        "worker": worker_identity(),
        "outcome": AttemptOutcome.SUCCESS.value,
        "duration": duration,
        "attempt": attempt.pk,
    }
    with connection.cursor() as cursor:
        cursor.execute(FINISH_SUCCESS_SQL, params)
        (updated,) = cursor.fetchone()
    if not updated:
        raise Fenced(f"job {job.pk} no longer holds this worker's claim; this worker's outcome is dropped")
    job.state, job.lesson_id, job.finished_at, job.updated_at = JobState.SUCCEEDED, lesson_id, now, now
    job.claimed_by, job.claim_expires_at = "", None
    attempt.finished_at, attempt.outcome, attempt.error = now, AttemptOutcome.SUCCESS, ""
    attempt.duration = duration


def append_lessons_md(lesson: Any) -> None:
    """chatcli's LESSONS.md mirror (docs/compat/chatcli.md#lessons-md): a newly generated lesson is
    appended to ``<LESSONQ_BASE_DIR>/LESSONS.md`` unless ``LESSONQ_LESSONS_DOC=off``. Best effort, after
    the commit, as chatcli: a failure is logged and costs nothing else (the database is the record)."""
    if not settings.LESSONQ_LESSONS_DOC:
        return
    from lessons.interchange import LESSONS_MD_HEADER, lessons_md

    path = base() / "LESSONS.md"
    try:
        entry = lessons_md([lesson])[len(LESSONS_MD_HEADER) :]
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as out:
            if out.tell() == 0:
                out.write(LESSONS_MD_HEADER)
            out.write(entry)
    except OSError:
        log.debug("lessonq: could not append lesson %s to %s", lesson.pk, path, exc_info=True)


def retry_or_dead(job: Job, attempt: JobAttempt, error: str) -> None:
    retry = policy()
    if not retry.should_retry(job.attempts):
        finish_dead(job, error, attempt=attempt, attempt_outcome=AttemptOutcome.TRANSIENT)
        return
    delay = retry.delay(job.attempts, _rng)
    now = timezone.now()
    next_at = now + timedelta(seconds=delay)
    with transaction.atomic():
        ensure_ours(job)
        wal().update(
            _record_of(job).with_retry(attempts=job.attempts, next_attempt_at=gojson.local(next_at), last_error=error)
        )
        faults.point("transient.after_wal")
        job.mark_retry_wait(next_attempt_at=next_at, error=error)
        Job.objects.filter(pk=job.pk).update(dispatched_at=now)
        attempt.finish(AttemptOutcome.TRANSIENT, error)
    metrics.RETRIES.labels(attempt=str(job.attempts)).inc()
    faults.point("transient.after_row")
    publish(job.pk, countdown=delay)


def defer_for_llm(job: Job, attempt: JobAttempt, error: str) -> None:
    """Give the attempt back and park the job undispatched until the breaker closes (the sweeper then
    dispatches it). The WAL record keeps the attempts it had before this claim."""
    attempts = max(job.attempts - 1, 0)
    reason = (llm.unavailable_reason() or error)[:300]
    now = timezone.now()
    with transaction.atomic():
        ensure_ours(job)
        wal().update(job.wal_job().with_retry(attempts=attempts, next_attempt_at=gojson.local(now), last_error=error))
        Job.objects.filter(pk=job.pk).update(
            state=JobState.RETRY_WAIT if attempts else JobState.PENDING,
            attempts=attempts,
            next_attempt_at=now,
            last_error=error,
            waiting_reason=reason,
            dispatched_at=None,
            claimed_by="",
            claim_expires_at=None,
            updated_at=now,
        )
        attempt.finish(AttemptOutcome.TRANSIENT, f"not counted (LLM unreachable, the job waits): {error}")
    log.info("lessonq: %s waits for the LLM (breaker open): %s", job.id, error)


def _resume_at(now: datetime, seconds: float) -> datetime:
    """When a job that met a rate limit is due again: the pause's end, spread over up to a fifth more
    (and at least 50 ms) so the jobs of a node do not all wake at the same instant."""
    return now + timedelta(seconds=max(seconds, 0.0) * (1 + 0.2 * _rng.random()) + 0.05)


def wait_out_pause(job_id: str, pause: Any) -> str:
    """A due, dispatched, waiting job of this node meets a rate-limit pause: without a claim or an attempt,
    it is due again when the pause ends (WAL, then row, then a message with that countdown). A duplicate
    message finds the job not due and does nothing; "" when the job is not such a job."""
    now = timezone.now()
    resume = _resume_at(now, pause.seconds(now))
    reason = pause.text[:300]
    with transaction.atomic():
        job = (
            Job.objects.select_for_update()
            .filter(pk=job_id, node=settings.LESSONQ_QUEUE, state__in=WAITING, next_attempt_at__lte=now)
            .exclude(dispatched_at=None)
            .first()
        )
        if job is None:
            return ""
        record = _record_of(job)
        wal().update(
            record.with_retry(attempts=job.attempts, next_attempt_at=gojson.local(resume), last_error=job.last_error)
        )
        Job.objects.filter(pk=job.pk).update(
            next_attempt_at=resume, dispatched_at=now, waiting_reason=reason, updated_at=now
        )
    publish(job.pk, countdown=(resume - now).total_seconds())
    return "rate-limited"


def defer_for_rate_limit(job: Job, attempt: JobAttempt, exc: llm.LLMRateLimited) -> None:
    """Give the attempt back and make the job due when the rate-limit pause ends (WAL → row → message)."""
    attempts = max(job.attempts - 1, 0)
    now = timezone.now()
    resume = _resume_at(now, exc.retry_after if exc.retry_after is not None else settings.LLM_RATE_LIMIT_BACKOFF)
    error = exc.message
    with transaction.atomic():
        ensure_ours(job)
        wal().update(
            _record_of(job).with_retry(attempts=attempts, next_attempt_at=gojson.local(resume), last_error=error)
        )
        Job.objects.filter(pk=job.pk).update(
            state=JobState.RETRY_WAIT if attempts else JobState.PENDING,
            attempts=attempts,
            next_attempt_at=resume,
            last_error=error,
            waiting_reason=error[:300],
            dispatched_at=now,
            claimed_by="",
            claim_expires_at=None,
            updated_at=now,
        )
        attempt.finish(AttemptOutcome.TRANSIENT, f"not counted (LLM rate-limited, the job waits): {error}")
    log.info("lessonq: %s waits out the LLM's rate limit (%.1f s): %s", job.id, (resume - now).total_seconds(), error)
    publish(job.pk, countdown=(resume - now).total_seconds())


def finish_dead(
    job: Job,
    error: str,
    *,
    attempt: JobAttempt | None = None,
    attempt_outcome: str = AttemptOutcome.PERMANENT,
    reply: str = "",
) -> None:
    """DLQ put (idempotent: an existing DLQ record is kept, as chatcli) → row dead → unlink WAL.
    ``reply``: the model's reply that failed to parse, kept (bounded) on the attempt row."""
    with transaction.atomic():
        ensure_ours(job)
        record = _record_of(job)
        dlq().append(record.with_retry(attempts=job.attempts, next_attempt_at=record.next_attempt_at, last_error=error))
        faults.point("dead.after_dlq")
        job.mark_dead(error)
        if attempt is not None:
            attempt.finish(attempt_outcome, error, reply=reply)
    faults.point("dead.after_row")
    wal().ack(job.id)


def _record_of(job: Job) -> WalJob:
    """The job's WAL record as written at ingest — its exact text, which the row may hold only with NUL
    replaced (docs/api.md#input-policy) — or, when it is missing or unreadable, the row's version."""
    try:
        record = wal().read(job.id)
    except WalError:
        record = None
    return record if record is not None else job.wal_job()
