"""Polling with a deadline: the only way tests wait for another process. Never a bare sleep. The loop is
the project's own (``lessonboard.waiting.poll``); this adds the failure a test wants."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from lessonboard.waiting import poll

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.05, what: str = "") -> T:
    """Return ``predicate()``'s first truthy value; ``AssertionError`` if none before ``timeout``."""
    value = poll(predicate, timeout=timeout, interval=interval)
    if not value:
        raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
    return value
