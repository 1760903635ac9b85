"""No single scheduler (lessonq.leader): beat runs on two nodes, only the leader's sends; kill -9 the
leader and the other takes the schedule over — a lost message is re-published and an open LLM breaker
closes (its probe runs) while the first beat is still dead. Real beat and worker processes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from lessonboard.models import BreakerState, LLMBreaker
from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job, JobState, LeaderLease, Outbox
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.support.processes import CeleryWorker, ManagedProcess, subprocess_env
from tests.support.queue import LESSON
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

SENT = "Sending due task"


def beat(name: str, env: dict[str, str], tmp_path: Path) -> ManagedProcess:
    cmd = [sys.executable, "-m", "celery", "-A", "lessonboard", "beat", "--loglevel", "INFO"]
    cmd += ["--schedule", str(tmp_path / f"{name}-schedule"), "--pidfile", str(tmp_path / f"{name}.pid")]
    return ManagedProcess(name, cmd, env)


def holder() -> str:
    lease = LeaderLease.objects.filter(name="scheduler", expires_at__gt=timezone.now()).first()
    return lease.holder if lease else ""


def lost_message_job() -> str:
    """A job whose message went missing on the broker: dispatched long ago, nothing owed, nothing sent."""
    with transaction.atomic():
        job_id = enqueue(
            LessonRequest(task="its message was lost", attempt="a", outcome="ERROR: x", trigger="error")
        ).job_id
        Outbox.objects.filter(job_id=job_id).delete()  # before the commit: the dispatcher never sees it
        long_ago = timezone.now() - timedelta(minutes=5)
        Job.objects.filter(pk=job_id).update(dispatched_at=long_ago, next_attempt_at=long_ago)
    return job_id


def test_the_schedule_moves_to_the_other_beat_when_its_holder_is_killed(
    queue_dir: Path,
    fake_openai: FakeOpenAIServer,
    start_worker: Callable[..., CeleryWorker],
    settings: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    fake_openai.responder = lambda payload: Reply(text=LESSON)
    LeaderLease.objects.all().delete()
    node = settings.NODE
    env = subprocess_env(
        LESSONQ_BASE_DIR=str(queue_dir),
        LESSONBOARD_NODE=node,
        LESSONBOARD_LLM_TIMEOUT="5s",
        LESSONQ_INITIAL_DELAY="50ms",
        LESSONQ_JITTER="0",
        LESSONQ_REDISPATCH_AFTER="1s",
        LESSONQ_SWEEP_INTERVAL="500ms",
        LESSONQ_NODE_LEASE="3s",
        LESSONQ_NODE_LEASE_RENEW="500ms",
        LESSONBOARD_LLM_BREAKER_PROBE_INTERVAL="500ms",
        LESSONBOARD_LLM_BREAKER_PROBE_TIMEOUT="2s",
    )
    start_worker(queues=[f"lessonq.{node}", "default", "llm"], env=env, concurrency=2, hostname=f"{node}@%h")
    first = beat("beat-one", env, tmp_path)
    request.addfinalizer(first.kill)
    wait_for(lambda: holder().endswith(f":{first.pid}"), timeout=60, what="the first beat taking the lease")
    second = beat("beat-two", {**env, "LESSONBOARD_NODE": node + "x"}, tmp_path)  # beat on another node
    request.addfinalizer(second.stop)
    wait_for(lambda: "stands by" in second.log(), timeout=60, what="the second beat standing by")
    wait_for(lambda: first.log().count(SENT) >= 3, timeout=60, what="the leader sending its periodic tasks")
    assert SENT not in second.log() and holder().endswith(f":{first.pid}")

    first.kill()  # kill -9: no hand-over, the lease has to run out
    killed_at = timezone.now()
    job_id = lost_message_job()
    LLMBreaker.objects.update_or_create(  # the LLM came back, but the breaker is open: only a probe closes it
        pk=settings.LLM_BASE_URL,
        defaults={
            "state": BreakerState.OPEN,
            "failures": 5,
            "opened_at": killed_at,
            "last_error": "was down",
            "probe_at": killed_at,
        },
    )

    wait_for(lambda: holder().endswith(f":{second.pid}"), timeout=60, what="the second beat taking the lease over")
    wait_for(
        lambda: LLMBreaker.objects.filter(pk=settings.LLM_BASE_URL, state=BreakerState.CLOSED).exists(),
        timeout=60,
        what="the breaker closed by a probe the new leader scheduled",
    )
    breaker = LLMBreaker.objects.get(pk=settings.LLM_BASE_URL)
    assert breaker.probes >= 1 and breaker.closed_at is not None and breaker.closed_at > killed_at
    wait_for(
        lambda: Job.objects.filter(pk=job_id, state=JobState.SUCCEEDED).exists(),
        timeout=60,
        what="the lost message re-published and its job done",
    )
    job = Job.objects.get(pk=job_id)
    assert job.redispatches >= 1 or job.dispatched_at > killed_at  # re-published after the kill
    assert not first.alive() and SENT in second.log()
    lease = LeaderLease.objects.get(name="scheduler")
    assert lease.node == f"lessonq.{node}x" and lease.epoch == 2
