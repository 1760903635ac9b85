"""One attempt at a time, called directly (the Celery task is a thin wrapper): outcome classification,
retry state in the WAL and the row, the DLQ, idempotent success."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from lessonq import processing
from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job, JobState
from lessonq.paths import dlq, wal
from lessons.models import Lesson
from tests.fakes.openai_server import Reply
from tests.support.queue import LESSON

pytestmark = pytest.mark.django_db


def accepted(task: str = "Edit main.go", **kw: Any) -> str:
    request = LessonRequest(task=task, attempt="used full rewrite", outcome="ERROR: file too large", trigger="error")
    result = enqueue(request, agent="coder", workspace="proj", **kw)
    assert result.status == "accepted"
    return result.job_id


def make_due(job_id: str) -> None:
    Job.objects.filter(pk=job_id).update(next_attempt_at=timezone.now() - timedelta(seconds=1))


def test_it_turns_a_good_answer_into_a_lesson_and_acks(queue_dir: Path, fake_openai: Any) -> None:
    fake_openai.script(Reply(text=LESSON))
    job_id = accepted()
    assert processing.process(job_id) == "success"
    job = Job.objects.get(pk=job_id)
    lesson = Lesson.objects.get(source_job_id=job_id)
    assert (job.state, job.attempts, job.lesson_id) == (JobState.SUCCEEDED, 1, lesson.pk)
    assert lesson.tags == ["go", "edit-file", "reflexion", "trigger:error"]
    assert lesson.content == "LESSON: edit large file\nMISTAKE: full rewrite\nCORRECTION: use Edit\nTRIGGER: error"
    assert (lesson.agent, lesson.workspace.slug) == ("coder", "proj")  # type: ignore[union-attr]
    assert lesson.versions.get().actor == f"job:{job_id}"
    assert not wal().exists(job_id)
    assert [(a.number, a.outcome) for a in job.attempt_rows.all()] == [(1, "success")]
    [request] = fake_openai.chat_requests()
    messages = request.json["messages"]
    assert request.json["max_tokens"] == 600
    assert messages[1]["content"] == (
        "TASK:\nEdit main.go\n\nATTEMPT:\nused full rewrite\n\nOUTCOME (why we are reflecting):\n"
        "ERROR: file too large\n\nTRIGGER: error"
    )


def test_a_lesson_job_is_twelve_statements(queue_dir: Path, fake_openai: Any) -> None:
    """The claim starts the attempt row, the success's job and attempt rows are one fenced statement,
    and nothing is read back (docs/queue.md): a regression here costs every job a round trip. Twelve
    with the job's workspace (read for the dedupe scope) and the call's usage record (one INSERT,
    lessonboard/llm/usage.py), beside the transaction's BEGIN and COMMIT."""
    from lessonboard import pauses

    fake_openai.script(Reply(text=LESSON))
    job_id = accepted()
    pauses.current()  # the queue pauses are read once per process every 2 s, not per job
    with CaptureQueriesContext(connection) as queries:
        assert processing.process(job_id) == "success"
    statements = [
        q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
    ]
    assert len(statements) == 12, "\n".join(s[:60].replace("\n", " ") for s in statements)
    claim, finish = statements[1], statements[-1]
    assert "UPDATE queue_job" in claim and "INSERT INTO queue_jobattempt" in claim
    assert "UPDATE queue_job" in finish and "UPDATE queue_jobattempt" in finish
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.claimed_by, job.lesson_id) == (JobState.SUCCEEDED, "", Lesson.objects.get().pk)
    [attempt] = job.attempt_rows.all()
    assert (attempt.number, attempt.outcome, attempt.finished_at is not None) == (1, "success", True)


def test_a_second_delivery_does_nothing(queue_dir: Path, fake_openai: Any) -> None:
    fake_openai.script(Reply(text=LESSON))
    job_id = accepted()
    processing.process(job_id)
    assert processing.process(job_id) == "finished"
    assert Lesson.objects.count() == 1 and len(fake_openai.chat_requests()) == 1


def test_it_skips_without_a_lesson(queue_dir: Path, fake_openai: Any) -> None:
    fake_openai.script(Reply(text="<skip>nothing actionable</skip>"))
    job_id = accepted()
    assert processing.process(job_id) == "skipped"
    assert Job.objects.get(pk=job_id).state == JobState.SKIPPED
    assert Lesson.objects.count() == 0 and not wal().exists(job_id)


def test_it_retries_a_transient_error_with_the_state_in_the_wal(
    queue_dir: Path, fake_openai: Any, settings: Any
) -> None:
    settings.LESSONQ_INITIAL_DELAY = 10.0
    fake_openai.script(Reply(status=502), Reply(text=LESSON))
    job_id = accepted()
    before = timezone.now()
    assert processing.process(job_id) == "transient"
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RETRY_WAIT and job.attempts == 1 and "502" in job.last_error
    assert timedelta(seconds=9.9) < job.next_attempt_at - before < timedelta(seconds=11)
    record = wal().read(job_id)
    assert record is not None and (record.attempts, record.last_error) == (1, job.last_error)
    assert abs(record.next_attempt_at - job.next_attempt_at) < timedelta(milliseconds=1)
    assert processing.process(job_id) == "not-claimed"  # not due yet
    make_due(job_id)
    assert processing.process(job_id) == "success"
    assert [a.outcome for a in Job.objects.get(pk=job_id).attempt_rows.all()] == ["transient", "success"]


def test_a_429_waits_out_the_pause_without_spending_an_attempt(
    queue_dir: Path, fake_openai: Any, settings: Any
) -> None:
    from lessonboard.models import LLMBreaker

    fake_openai.script(Reply(status=429, headers={"Retry-After": "30"}), Reply(text=LESSON))
    job_id = accepted()
    before = timezone.now()
    assert processing.process(job_id) == "rate-limited"
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.PENDING and job.attempts == 0 and "429" in job.last_error
    assert timedelta(seconds=29) < job.next_attempt_at - before < timedelta(seconds=37)
    record = wal().read(job_id)
    assert record is not None and record.attempts == 0
    assert abs(record.next_attempt_at - job.next_attempt_at) < timedelta(milliseconds=1)
    [attempt] = job.attempt_rows.all()
    assert attempt.error.startswith("not counted (LLM rate-limited")
    # A second job meets the pause before any claim: no call, no attempt row, due when the pause ends.
    other = accepted(task="another task")
    assert processing.process(other) == "rate-limited"
    waiting = Job.objects.get(pk=other)
    assert waiting.attempts == 0 and not waiting.attempt_rows.exists()
    assert waiting.waiting_reason.startswith("LLM rate-limited until") and waiting.next_attempt_at > before
    assert wal().read(other).next_attempt_at == waiting.next_attempt_at  # type: ignore[union-attr]
    assert processing.process(other) == "not-claimed"  # a duplicate message: not due, nothing happens
    assert len(fake_openai.chat_requests()) == 1
    # The pause ends: the job runs, its first counted attempt succeeds.
    LLMBreaker.objects.update(paused_until=timezone.now() - timedelta(seconds=1))
    make_due(job_id)
    assert processing.process(job_id) == "success"
    done = Job.objects.get(pk=job_id)
    assert done.attempts == 1 and [a.outcome for a in done.attempt_rows.all()] == ["transient", "success"]
    assert LLMBreaker.objects.get().rate_limits == 0


def test_it_moves_a_job_to_the_dlq_when_attempts_run_out(queue_dir: Path, fake_openai: Any, settings: Any) -> None:
    settings.LESSONQ_MAX_ATTEMPTS = 3
    fake_openai.responder = lambda payload: Reply(status=503, error_message="provider down")
    job_id = accepted()
    for _ in range(3):
        make_due(job_id)
        processing.process(job_id)
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.DEAD and job.attempts == 3
    assert [(a.outcome, "provider down" in a.error) for a in job.attempt_rows.all()] == [("transient", True)] * 3
    record = dlq().read(job_id)
    assert record is not None and record.attempts == 3 and "provider down" in record.last_error
    assert not wal().exists(job_id)


def test_it_sends_unparseable_output_to_the_dlq_at_once(queue_dir: Path, fake_openai: Any) -> None:
    fake_openai.script(Reply(text="You should be more careful next time."))
    job_id = accepted()
    assert processing.process(job_id) == "permanent"
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.DEAD and job.attempts == 1
    assert job.last_error == "lesson parser: no recognized blocks in response"
    assert dlq().exists(job_id) and not wal().exists(job_id)


def test_the_dead_job_page_shows_the_reply_that_failed_bounded_and_escaped(
    queue_dir: Path, fake_openai: Any, client_as: Any, carol: Any
) -> None:
    reply = "Here is what I think: <script>alert(1)</script> " + "x" * 5000
    fake_openai.script(Reply(text=reply))
    job_id = accepted()
    assert processing.process(job_id) == "permanent"
    [attempt] = Job.objects.get(pk=job_id).attempt_rows.all()
    assert attempt.reply == reply[: attempt.REPLY_CHARS]
    page = client_as(carol).get(f"/queue/jobs/{job_id}/").content.decode()
    assert "Here is what I think: &lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert f"first {attempt.REPLY_CHARS} characters" in page and "x" * 5000 not in page


def test_it_treats_a_permanent_provider_error_as_permanent(queue_dir: Path, fake_openai: Any) -> None:
    fake_openai.script(Reply(status=401, error_message="bad key"))
    job_id = accepted()
    assert processing.process(job_id) == "permanent"
    assert Job.objects.get(pk=job_id).state == JobState.DEAD


def test_it_retries_a_timeout(queue_dir: Path, fake_openai: Any, settings: Any) -> None:
    settings.LESSONQ_JOB_TIMEOUT = 0.5
    fake_openai.script(Reply(delay=3, text=LESSON))
    job_id = accepted()
    assert processing.process(job_id) == "transient"
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RETRY_WAIT and "timed out" in job.last_error


def test_it_claims_a_job_once(queue_dir: Path, fake_openai: Any) -> None:
    job_id = accepted()
    job = Job.objects.get(pk=job_id)
    assert job.claim(timeout=60) is True
    assert Job.objects.get(pk=job_id).claim(timeout=60) is False  # our own process holds a live claim


def test_it_reclaims_a_dead_workers_job_and_counts_the_lost_attempt(queue_dir: Path, fake_openai: Any) -> None:
    from lessonq.models import JobAttempt

    fake_openai.script(Reply(text=LESSON))
    job_id = accepted()
    import socket

    Job.objects.filter(pk=job_id).update(
        state=JobState.RUNNING,
        attempts=1,
        claimed_by=f"{socket.gethostname()}:999999999",
        claim_expires_at=timezone.now() + timedelta(minutes=5),
    )
    JobAttempt.objects.create(job_id=job_id, number=1)
    assert processing.process(job_id) == "success"
    job = Job.objects.get(pk=job_id)
    assert job.attempts == 2
    assert [a.outcome for a in job.attempt_rows.all()] == ["lost", "success"]


def test_a_job_lost_on_its_last_attempt_ends_dead(queue_dir: Path, fake_openai: Any, settings: Any) -> None:
    settings.LESSONQ_MAX_ATTEMPTS = 1
    job_id = accepted()
    Job.objects.filter(pk=job_id).update(
        state=JobState.RUNNING, attempts=1, claimed_by="h:1", claim_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert processing.process(job_id) == "dead"
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.DEAD and "worker lost" in job.last_error
    assert dlq().exists(job_id) and not wal().exists(job_id)
    assert fake_openai.chat_requests() == []


def test_it_leaves_jobs_waiting_without_an_llm(queue_dir: Path, settings: Any) -> None:
    settings.LLM_BASE_URL = ""
    job_id = accepted()
    Job.objects.filter(pk=job_id).update(dispatched_at=timezone.now())
    assert processing.process(job_id) == "waiting-for-llm"
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.PENDING and job.attempts == 0 and "no LLM configured" in job.waiting_reason
