"""Queue fixtures every folder uses (a pytest plugin, registered in tests/conftest.py): an isolated WAL base
dir and node per test (``queue_dir``), job rows as a queue would leave them (``make_job``, ``jobs``), and
WAL records (``record``)."""

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

from lessonq import gojson
from lessonq.models import Job, JobAttempt, JobState
from lessonq.paths import dlq
from lessonq.wal import WalJob

LESSON = "<situation>edit large file</situation><mistake>full rewrite</mistake><correction>use Edit</correction><tags>go, edit-file</tags>"


QUEUE_FOLDERS = ("wal", "dlq", "quarantine", "expired")


def new_queue_folders(parent: Path) -> tuple[Path, str]:
    """A LESSONQ_BASE_DIR under ``parent`` with its folders, and a node name of its own."""
    base = parent / "lessonq"
    for sub in QUEUE_FOLDERS:
        (base / sub).mkdir(parents=True)
    return base, "q3" + uuid.uuid4().hex[:8]


def act_as_node(settings: Any, base: Path, node: str) -> Path:
    """This test process is ``node`` with its WAL under ``base``, and retries come quickly."""
    settings.LESSONQ_BASE_DIR = base
    settings.NODE = node
    settings.LESSONQ_QUEUE = f"lessonq.{node}"
    settings.LESSONQ_INITIAL_DELAY = 0.05
    settings.LESSONQ_JITTER = 0.0
    settings.LESSONQ_REDISPATCH_AFTER = 1.0
    return base


@pytest.fixture
def queue_dir(settings: Any, tmp_path: Path) -> Path:
    """A fresh LESSONQ_BASE_DIR and a node name of its own (so no other worker takes our messages)."""
    return act_as_node(settings, *new_queue_folders(tmp_path))


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
def jobs(queue_dir: Path) -> Callable[..., Job]:
    return make_job


def record(job_id: str, **fields: Any) -> WalJob:
    now = gojson.local(timezone.now())
    values: dict[str, Any] = dict(
        id=job_id, task=f"task {job_id}", outcome="ERROR: x", trigger="error", enqueued_at=now, next_attempt_at=now
    )
    values.update(fields)
    return WalJob(**values)
