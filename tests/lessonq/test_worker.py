"""Every outcome path through a real Celery worker process and the fake OpenAI server."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job, JobState
from lessonq.paths import dlq, wal
from lessons.models import Lesson
from tests.fakes.openai_server import Reply
from tests.support.queue import LESSON
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def task_of(payload: dict[str, Any]) -> str:
    user = payload["messages"][-1]["content"]
    return user.split("\n", 2)[1]


def scripted(plan: dict[str, list[Reply]]) -> Callable[[dict[str, Any]], Reply]:
    """Per task, the replies in order (the last one repeats)."""
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def respond(payload: dict[str, Any]) -> Reply:
        task = task_of(payload)
        with lock:
            n = calls[task]
            calls[task] += 1
        replies = plan[task]
        return replies[min(n, len(replies) - 1)]

    return respond


def submit(task: str) -> str:
    return enqueue(LessonRequest(task=task, attempt="a", outcome="ERROR: x", trigger="error")).job_id


def finished(*ids: str) -> bool:
    return Job.objects.filter(pk__in=ids, state__in=["succeeded", "skipped", "dead"]).count() == len(ids)


def test_it_runs_every_outcome_path(queue_dir: Path, fake_openai: Any, lesson_worker: Any) -> None:
    fake_openai.responder = scripted(
        {
            "success": [Reply(text=LESSON)],
            "skip": [Reply(text="<skip>nothing actionable</skip>")],
            "rate-limited": [Reply(status=429), Reply(text=LESSON.replace("edit large file", "rate limited"))],
            "down": [Reply(status=503, error_message="upstream down")],
            "malformed": [Reply(text="no blocks here")],
            "slow": [Reply(delay=6, text=LESSON), Reply(text=LESSON.replace("edit large file", "slow one"))],
        }
    )
    lesson_worker(LESSONQ_MAX_ATTEMPTS="3", LESSONQ_JOB_TIMEOUT="2s", concurrency=2)
    ids = {task: submit(task) for task in ("success", "skip", "rate-limited", "down", "malformed", "slow")}
    wait_for(lambda: finished(*ids.values()), timeout=90, what="all jobs finished")
    jobs = {task: Job.objects.get(pk=job_id) for task, job_id in ids.items()}
    assert {t: j.state for t, j in jobs.items()} == {
        "success": "succeeded",
        "skip": "skipped",
        "rate-limited": "succeeded",
        "down": "dead",
        "malformed": "dead",
        "slow": "succeeded",
    }

    # The 429 paused every call for a moment (docs/operations.md#llm-rate-limit): attempts that met the pause
    # were given back ("not counted"), so only the counted ones are compared.
    def counted(job: Job) -> list[Any]:
        return [a for a in job.attempt_rows.all() if not a.error.startswith("not counted")]

    rate_limited = [a.outcome for a in jobs["rate-limited"].attempt_rows.all()]
    assert rate_limited[0] == "transient" and rate_limited[-1] == "success" and jobs["rate-limited"].attempts == 1
    down = [(a.outcome, "upstream down" in a.error) for a in counted(jobs["down"])]
    assert down == [("transient", True)] * 3 and jobs["down"].attempts == 3
    assert dlq().read(ids["down"]).attempts == 3  # type: ignore[union-attr]
    assert [a.outcome for a in counted(jobs["malformed"])] == ["permanent"]
    slow = counted(jobs["slow"])
    assert [a.outcome for a in slow] == ["transient", "success"] and "timed out" in slow[0].error
    assert Lesson.objects.filter(source_job_id__in=ids.values()).count() == 3
    assert wal().count() == 0 and dlq().count() == 2


def test_duplicate_deliveries_process_a_job_once(queue_dir: Path, fake_openai: Any, lesson_worker: Any) -> None:
    from lessonq.dispatch import publish

    fake_openai.responder = lambda payload: Reply(delay=0.5, text=LESSON)
    lesson_worker(concurrency=2)
    job_id = submit("twice")
    for _ in range(4):
        publish(job_id)
    wait_for(lambda: finished(job_id), timeout=60, what="job finished")
    assert len(fake_openai.chat_requests()) == 1
    assert Job.objects.get(pk=job_id).attempts == 1


def test_it_waits_for_an_llm_and_runs_once_one_is_configured(
    queue_dir: Path, fake_openai: Any, lesson_worker: Any, settings: Any
) -> None:
    from lessonq import reconcile

    url = settings.LLM_BASE_URL
    settings.LLM_BASE_URL = ""
    job_id = submit("later")
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.PENDING and "no LLM configured" in job.waiting_reason
    fake_openai.script(Reply(text=LESSON))
    settings.LLM_BASE_URL = url
    lesson_worker()
    reconcile.sweep()  # what beat runs every LESSONQ_SWEEP_INTERVAL
    wait_for(lambda: finished(job_id), timeout=60, what="job ran")
    assert Job.objects.get(pk=job_id).state == JobState.SUCCEEDED


def test_two_nodes_process_only_their_own_wal(
    queue_dir: Path, fake_openai: Any, lesson_worker: Any, settings: Any, tmp_path: Path
) -> None:
    fake_openai.responder = lambda payload: Reply(text=LESSON.replace("edit large file", task_of(payload)))
    node_a, base_a = settings.NODE, queue_dir
    job_a = submit("on node a")
    node_b, base_b = node_a + "b", tmp_path / "node-b"
    settings.NODE, settings.LESSONQ_QUEUE, settings.LESSONQ_BASE_DIR = node_b, f"lessonq.{node_b}", base_b
    job_b = submit("on node b")
    assert (base_b / "wal" / f"{job_b}.wal").exists() and not (base_a / "wal" / f"{job_b}.wal").exists()
    worker_b = lesson_worker(base=base_b, node=node_b)
    wait_for(lambda: finished(job_b), timeout=60, what="node b's job")
    assert Job.objects.get(pk=job_a).state == JobState.PENDING  # node a has no worker yet
    assert (base_a / "wal" / f"{job_a}.wal").exists()
    worker_b.stop()
    lesson_worker(base=base_a, node=node_a)
    wait_for(lambda: finished(job_a), timeout=60, what="node a's job")
    assert Job.objects.get(pk=job_a).node == f"lessonq.{node_a}"
    assert not (base_a / "wal" / f"{job_a}.wal").exists() and not (base_b / "wal" / f"{job_b}.wal").exists()


def test_a_worker_replays_its_wal_at_start(queue_dir: Path, fake_openai: Any, lesson_worker: Any) -> None:
    from lessonq import gojson
    from lessonq.wal import WalJob

    fake_openai.responder = lambda payload: Reply(text=LESSON)
    from django.utils import timezone

    now = gojson.local(timezone.now())
    records = [
        WalJob(id=f"{i:016x}", task=f"left over {i}", trigger="error", enqueued_at=now, next_attempt_at=now)
        for i in (1, 2)
    ]
    for r in records:
        wal().append(r)
    lesson_worker()
    wait_for(lambda: finished(*(r.id for r in records)), timeout=60, what="replayed jobs")
    assert wal().count() == 0
