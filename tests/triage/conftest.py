"""Triage fixtures: jobs made directly as rows (and DLQ records for dead ones), as a queue would leave them."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from lessonq.models import Job, JobAttempt, JobState
from lessonq.paths import dlq
from tests.lessonq.conftest import queue_dir  # noqa: F401  (re-exported fixture)
from tests.support.processes import CeleryWorker, subprocess_env

_n = itertools.count()


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def make_job(
    *,
    state: str = JobState.DEAD,
    task: str = "refactor the parser",
    error: str = "permanent: malformed lesson output",
    trigger: str = "error",
    agent: str = "",
    workspace: Any = None,
    attempts: int = 1,
    enqueued_at: datetime | None = None,
    finished_at: datetime | None = None,
    node: str | None = None,
    record: bool = True,
) -> Job:
    """A job row in ``state``; a dead one also gets its DLQ record (so retry/purge work on it)."""
    now = timezone.now()
    enqueued_at = enqueued_at or now - timedelta(minutes=next(_n) % 50 + 1)
    done = state not in (JobState.PENDING, JobState.RUNNING, JobState.RETRY_WAIT)
    job = Job.objects.create(
        id=new_id(),
        node=node or settings.LESSONQ_QUEUE,
        state=state,
        task=task,
        output="the agent's output",
        outcome="ERROR: it failed",
        trigger=trigger,
        agent=agent,
        workspace=workspace,
        attempts=attempts,
        enqueued_at=enqueued_at,
        next_attempt_at=enqueued_at,
        last_error=error if state in (JobState.DEAD, JobState.RETRY_WAIT) else "",
        finished_at=(finished_at or now) if done else None,
    )
    for n in range(1, attempts + 1):
        JobAttempt.objects.create(
            job=job,
            number=n,
            started_at=enqueued_at,
            finished_at=enqueued_at + timedelta(seconds=1),
            outcome="permanent" if n == attempts else "transient",
            error=error,
            duration=1.0,
        )
    if state == JobState.DEAD and record and job.node == settings.LESSONQ_QUEUE:
        dlq().append(job.wal_job())
    return job


@pytest.fixture
def jobs(queue_dir: Path) -> Callable[..., Job]:  # noqa: F811
    return make_job


def hx(client: Any, path: str, data: Any = None) -> Any:
    return client.get(path, data or {}, headers={"HX-Request": "true"})


@pytest.fixture
def bulk_worker(
    start_worker: Callable[..., CeleryWorker],
    queue_dir: Path,  # noqa: F811
    settings: Any,
) -> CeleryWorker:
    """A real worker for this test's node (same WAL dir), consuming a bulk queue of its own."""
    settings.LESSONQ_BULK_QUEUE = f"triage-{settings.NODE_NAME}"
    env = subprocess_env(LESSONQ_BASE_DIR=str(queue_dir), LESSONBOARD_NODE=settings.NODE_NAME)
    return start_worker(queues=[settings.LESSONQ_BULK_QUEUE], env=env, hostname=f"bulk-{settings.NODE_NAME}@%h")
