"""Graceful drain: SIGTERM stops taking jobs, lets in-flight ones finish within the drain timeout,
and cancels the rest, which the WAL keeps for the next worker."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job, JobState
from lessonq.paths import wal
from tests.fakes.openai_server import Reply
from tests.support.queue import LESSON
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def submit(task: str) -> str:
    return enqueue(LessonRequest(task=task, attempt="a", outcome="ERROR: x", trigger="error")).job_id


def test_sigterm_lets_an_in_flight_job_finish(queue_dir: Path, fake_openai: Any, lesson_worker: Any) -> None:
    fake_openai.script(Reply(delay=1.5, text=LESSON))
    worker = lesson_worker(LESSONQ_DRAIN_TIMEOUT="30s")
    job_id = submit("finish me")
    wait_for(lambda: fake_openai.chat_requests(), timeout=30, what="job in flight")
    worker.proc.send_signal(signal.SIGTERM)
    worker.proc.wait(timeout=30)
    assert Job.objects.get(pk=job_id).state == JobState.SUCCEEDED and not wal().exists(job_id)


def test_sigterm_cancels_a_job_that_outlasts_the_drain_timeout(
    queue_dir: Path, fake_openai: Any, lesson_worker: Any
) -> None:
    fake_openai.script(Reply(delay=60, text=LESSON))
    fake_openai.default = Reply(text=LESSON)
    worker = lesson_worker(LESSONQ_DRAIN_TIMEOUT="1s")
    job_id = submit("too slow")
    wait_for(lambda: fake_openai.chat_requests(), timeout=30, what="job in flight")
    worker.proc.send_signal(signal.SIGTERM)
    worker.proc.wait(timeout=30)  # well before the 60 s reply: the drain timeout cancelled the job
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING and wal().exists(job_id)  # the WAL keeps it
    lesson_worker()  # replay at start reclaims it
    wait_for(lambda: Job.objects.get(pk=job_id).state == JobState.SUCCEEDED, timeout=60, what="reclaimed job done")
    assert [a.outcome for a in Job.objects.get(pk=job_id).attempt_rows.all()] == ["lost", "success"]
