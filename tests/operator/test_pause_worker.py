"""Pause and resume through a real worker (docs/operations.md#pause-and-resume): a paused queue's job
waits without spending an attempt, the pause shows on the Overview and in /readyz, and resuming runs it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lessonboard import pauses
from lessonboard.models import AuditEvent, QueuePause
from lessonq.models import Job, JobState
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.processes import CeleryWorker, subprocess_env
from tests.support.queue import LESSON
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


@pytest.fixture(autouse=True)
def no_cached_pauses() -> Iterator[None]:
    pauses.forget()
    yield
    pauses.forget()


def test_a_paused_queues_job_waits_and_runs_once_resumed(
    fake_openai: FakeOpenAIServer,
    queue_dir: Any,
    settings: Any,
    start_worker: Callable[..., CeleryWorker],
    client_as: Callable[[Any], Any],
    alice: Any,
    api: Any,
) -> None:
    fake_openai.default.text = LESSON
    node = settings.NODE
    env = subprocess_env(
        LESSONQ_BASE_DIR=str(queue_dir),
        LESSONBOARD_NODE=node,
        LESSONQ_INITIAL_DELAY="50ms",
        LESSONQ_JITTER="0",
        LESSONBOARD_LLM_TIMEOUT="5s",
        LESSONBOARD_LLM_API_KEY="sk-test",
    )
    # The node's queue and "default", where resuming sends the sweep (as serve's worker consumes it).
    start_worker(queues=[f"lessonq.{node}", "default"], env=env, hostname=f"{node}@%h")
    operator = client_as(alice)

    answer = operator.post("/queues/lessonq/pause", {"reason": "provider incident"})
    assert answer.status_code == 302
    assert QueuePause.objects.filter(name="lessonq", paused_by=alice, reason="provider incident").exists()
    assert AuditEvent.objects.filter(action="queue.pause", actor_user=alice, object_ids=["lessonq"]).count() == 1

    accepted = api.post("/api/v1/reflexion/triggers", {"task": "paused task", "output": "a", "error": "x"})
    assert accepted.status_code == 202
    job_id = accepted.json()["job_id"]
    job = wait_for(
        lambda: Job.objects.filter(pk=job_id, waiting_reason__startswith="paused: queue lessonq, by alice").first(),
        timeout=30,
        what="the job to wait for the paused queue",
    )
    assert job.state == JobState.PENDING and job.attempts == 0 and job.dispatched_at is None
    assert "provider incident" in job.waiting_reason

    ready = json.loads(operator.get("/readyz").content)
    assert ready["status"] == "degraded" and ready["checks"]["pauses"]["ok"] is False
    assert ready["checks"]["pauses"]["detail"].startswith("paused: queue lessonq, by alice since ")
    overview = operator.get("/").content.decode()
    assert 'data-queue="lessonq" class="paused"' in overview and "/queues/lessonq/resume" in overview
    assert Job.objects.get(pk=job_id).state == JobState.PENDING  # still waiting, not failed

    assert operator.post("/queues/lessonq/resume").status_code == 302
    assert not QueuePause.objects.exists()
    assert AuditEvent.objects.filter(action="queue.resume", actor_user=alice).count() == 1
    done = wait_for(
        lambda: Job.objects.filter(pk=job_id, state=JobState.SUCCEEDED).first(),
        timeout=60,
        what="the job to run once the queue is resumed",
    )
    assert done.attempts == 1 and done.lesson_id is not None
