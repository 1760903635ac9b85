"""The LLM worker as `serve` starts it (``--pool threads``, LESSONBOARD_LLM_WORKER_THREADS): one process keeps
16 lesson jobs' LLM calls in flight at once, every job succeeds exactly once, and the node's limiter bounds
the calls in flight when the threads outnumber the slots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job, JobAttempt, JobState
from lessons.models import Lesson
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.support.queue import LESSON
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


@pytest.fixture
def fake_openai(settings: Any) -> Any:
    """A fake model of these tests' own: they count every call in flight, and the session's shared fake may
    also be answering another worker of this test process (an outage test's late retries, say)."""
    from lessonboard.llm import limiter

    server = FakeOpenAIServer().start()
    settings.LLM_BASE_URL, settings.LLM_MODEL, settings.LLM_API_KEY = server.url, server.model, "sk-test"
    settings.LLM_TIMEOUT = 5.0
    limiter.reset(server.model)  # a port used before must not bring an earlier test's adaptive limit along
    yield server
    server.stop()
    limiter.reset(server.model)


# The workers share the test's data directory, hence its broker: a worker given a data directory of its
# own consumes a broker of its own, and the test's sweeps (``settle``) publish where no worker reads. The
# node's LLM slots are keyed by the fake's URL, so these tests' slots are their own all the same. The
# calls' timeout outlasts the fake's held answers, which the test releases (or kills the worker under).
WORKER_ENV = {"LESSONQ_CAPACITY": "1000", "LESSONBOARD_LLM_TIMEOUT": "120s"}


def _lesson_for(payload: dict[str, Any]) -> Reply:
    user = payload["messages"][-1]["content"]
    return Reply(text=LESSON.replace("edit large file", user.split("\n", 2)[1]))


def _submit(n: int) -> list[str]:
    return [
        enqueue(LessonRequest(task=f"threaded task {i}", attempt="a", outcome="ERROR: x", trigger="error")).job_id
        for i in range(n)
    ]


@pytest.mark.parametrize(("threads", "slots", "expected"), [(16, 16, 16), (16, 6, 6)])
def test_one_threads_worker_keeps_the_slots_full_and_runs_each_job_once(
    queue_dir: Path,
    fake_openai: Any,
    lesson_worker: Any,
    settings: Any,
    threads: int,
    slots: int,
    expected: int,
) -> None:
    settings.LESSONQ_CAPACITY = 1000
    fake_openai.responder = _lesson_for
    fake_openai.latency = 60.0  # every answer waits until the test releases them
    lesson_worker(concurrency=threads, pool="threads", LESSONBOARD_LLM_CONCURRENCY=str(slots), **WORKER_ENV)
    ids = _submit(24)
    wait_for(lambda: fake_openai.in_flight >= expected, timeout=60, what=f"{expected} LLM calls in flight")
    assert fake_openai.max_in_flight == expected  # never more than the slots, with threads to spare
    fake_openai.release()
    wait_for(
        lambda: Job.objects.filter(pk__in=ids, state=JobState.SUCCEEDED).count() == len(ids),
        timeout=120,
        what="every job succeeded",
    )
    assert fake_openai.max_in_flight == expected
    # Exactly once: each job holds its lesson (near-identical ones merge in the store, as from any worker).
    assert not Job.objects.filter(pk__in=ids, lesson__isnull=True).exists()
    assert Lesson.objects.filter(source_job_id__in=ids).count() == len(
        set(Job.objects.filter(pk__in=ids).values_list("lesson_id", flat=True))
    )
    retried = Job.objects.filter(pk__in=ids, attempts__gt=1)
    # What the first attempt of a job that ran twice ended with (seen once in a loaded full run), for the log.
    why = list(JobAttempt.objects.filter(job__in=retried).values_list("job_id", "number", "outcome", "error"))
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}, why


def test_kill_9_of_the_threads_worker_mid_calls_loses_nothing_and_duplicates_nothing(
    queue_dir: Path, fake_openai: Any, lesson_worker: Any, settings: Any
) -> None:
    import os
    import signal

    from tests.lessonq.test_crash import assert_invariant, settle

    settings.LESSONQ_CAPACITY = 1000
    fake_openai.responder = _lesson_for
    fake_openai.latency = 60.0
    env = {**WORKER_ENV, "LESSONQ_JOB_TIMEOUT": "5s"}
    worker = lesson_worker(concurrency=8, pool="threads", **env)
    ids = _submit(8)
    wait_for(lambda: fake_openai.in_flight == 8, timeout=60, what="8 LLM calls in flight")
    os.kill(worker.pid, signal.SIGKILL)  # the one process, all its threads and their claims with it
    worker.proc.wait()
    fake_openai.latency = 0.0
    lesson_worker(concurrency=8, pool="threads", **env)
    settle(*ids, timeout=120)
    jobs = Job.objects.filter(pk__in=ids)
    assert {j.state for j in jobs} == {JobState.SUCCEEDED}
    assert {j.attempts for j in jobs} == {2}  # the killed attempt counts, as with a killed prefork child
    assert {tuple(a.outcome for a in j.attempt_rows.all()) for j in jobs} == {("lost", "success")}
    assert_invariant()
