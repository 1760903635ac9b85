"""Running now and cancel through a real worker (docs/operations.md#running-now): a job stuck in its LLM
call shows with its worker, node and elapsed time; cancel records the attempt as cancelled and sends the
job to Dead; the worker's late answer is dropped; Retry runs the job again. The Schedules page shows the
last run a worker recorded for a beat task."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lessonboard.models import AuditEvent, ScheduleRun
from lessonq.models import AttemptOutcome, Job, JobAttempt, JobState
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.support.processes import CeleryWorker, subprocess_env
from tests.support.queue import LESSON
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_a_stuck_job_is_shown_running_cancelled_and_retried(
    fake_openai: FakeOpenAIServer,
    queue_dir: Any,
    settings: Any,
    start_worker: Callable[..., CeleryWorker],
    client_as: Callable[[Any], Any],
    alice: Any,
    api: Any,
) -> None:
    fake_openai.script(Reply(text=LESSON, delay=8))  # the first call hangs: a stuck attempt
    fake_openai.default.text = LESSON
    node = settings.NODE
    env = subprocess_env(
        LESSONQ_BASE_DIR=str(queue_dir),
        LESSONBOARD_NODE=node,
        LESSONQ_INITIAL_DELAY="50ms",
        LESSONQ_JITTER="0",
        LESSONBOARD_LLM_TIMEOUT="30s",
        LESSONBOARD_LLM_API_KEY="sk-test",
    )
    start_worker(queues=[f"lessonq.{node}", "default"], env=env, hostname=f"{node}@%h")
    operator = client_as(alice)
    job_id = api.post("/api/v1/reflexion/triggers", {"task": "stuck task", "output": "a", "error": "x"}).json()[
        "job_id"
    ]
    wait_for(lambda: Job.objects.filter(pk=job_id, state=JobState.RUNNING).exists(), timeout=30, what="running")

    page = operator.get("/running/").content.decode()
    worker = JobAttempt.objects.get(job_id=job_id, number=1).worker  # host:pid of the worker's process
    assert f'data-job="{job_id}"' in page and f"<td>lessonq.{node}</td>" in page and f"<td>{worker}</td>" in page
    assert f"/running/{job_id}/cancel" in page and " s</td>" in page  # elapsed, and the cancel form

    assert operator.post(f"/running/{job_id}/cancel", {"reason": "stuck call"}).status_code == 302
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.DEAD and job.last_error == "cancelled by alice: stuck call"
    attempt = JobAttempt.objects.get(job_id=job_id, number=1)
    assert attempt.outcome == AttemptOutcome.CANCELLED and attempt.finished_at is not None
    assert AuditEvent.objects.filter(action="queue.cancel", actor_user=alice, object_ids=[job_id]).exists()
    assert "Nothing is running" in operator.get("/running/").content.decode()

    # The stuck call answers later: its outcome is dropped (no lesson from the cancelled attempt).
    wait_for(lambda: len(fake_openai.chat_requests()) >= 1, timeout=10, what="the stuck call")
    assert operator.post(f"/queue/jobs/{job_id}/retry").status_code in (200, 302)
    done = wait_for(
        lambda: Job.objects.filter(pk=job_id, state=JobState.SUCCEEDED).first(),
        timeout=60,
        what="the retried job to succeed",
    )
    assert done.lesson_id is not None
    assert len(fake_openai.chat_requests()) == 2  # the stuck call and the retry's, nothing else


def test_the_schedules_page_shows_a_beat_tasks_last_run_from_a_worker(
    celery_worker: CeleryWorker, client_as: Callable[[Any], Any], carol: Any
) -> None:
    from lessonboard.tasks import heartbeat

    heartbeat.delay()  # a beat task, sent as beat sends it
    run = wait_for(
        lambda: ScheduleRun.objects.filter(task=heartbeat.name, runs__gte=1).first(),
        timeout=60,
        what="the worker to record the heartbeat's run",
    )
    assert run.ok and run.duration_ms is not None and run.started_at is not None
    page = client_as(carol).get("/schedules/").content.decode()
    assert f'data-task="{heartbeat.name}"' in page and "lessonq.tasks.sweep_all" in page
    assert "at beat's next tick" in page  # a task that never ran yet has no next run but beat's next tick
