"""Queue fixtures: real lesson workers (the WAL dir and node per test, ``queue_dir``, are tests/support/queue.py's)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import CeleryWorker, subprocess_env


@pytest.fixture
def lesson_worker(
    start_worker: Callable[..., CeleryWorker], queue_dir: Path, settings: Any
) -> Callable[..., CeleryWorker]:
    """``lesson_worker(**env)`` → a real worker on this test's node queue, its WAL in ``queue_dir``."""

    def start(
        base: Path | None = None, node: str | None = None, concurrency: int = 1, pool: str | None = None, **env: str
    ) -> CeleryWorker:
        node = node or settings.NODE
        values = {
            "LESSONQ_BASE_DIR": str(base or queue_dir),
            "LESSONBOARD_NODE": node,
            "LESSONQ_INITIAL_DELAY": "50ms",
            "LESSONQ_JITTER": "0",
            "LESSONQ_REDISPATCH_AFTER": "1s",
            "LESSONBOARD_LLM_TIMEOUT": "5s",
        }
        if settings.LLM_BASE_URL:
            values.update(LESSONBOARD_LLM_BASE_URL=settings.LLM_BASE_URL, LESSONBOARD_LLM_MODEL=settings.LLM_MODEL)
        values.update(env)
        return start_worker(
            queues=[f"lessonq.{node}"],
            env=subprocess_env(**values),
            concurrency=concurrency,
            hostname=f"{node}@%h",
            pool=pool,
        )

    return start
