"""Triage fixtures: htmx requests and a bulk worker (job rows are made by tests/support/queue.py's ``make_job``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import CeleryWorker, subprocess_env


def hx(client: Any, path: str, data: Any = None) -> Any:
    return client.get(path, data or {}, headers={"HX-Request": "true"})


@pytest.fixture
def bulk_worker(
    start_worker: Callable[..., CeleryWorker],
    queue_dir: Path,
    settings: Any,
) -> CeleryWorker:
    """A real worker for this test's node (same WAL dir), consuming a bulk queue of its own."""
    settings.LESSONQ_BULK_QUEUE = f"triage-{settings.NODE}"
    env = subprocess_env(LESSONQ_BASE_DIR=str(queue_dir), LESSONBOARD_NODE=settings.NODE)
    return start_worker(queues=[settings.LESSONQ_BULK_QUEUE], env=env, hostname=f"bulk-{settings.NODE}@%h")
