"""Polling with a deadline: the only way tests wait for another process. Never a bare sleep."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_tick = threading.Event()  # never set: .wait(interval) is a pause that reads as what it is


def wait_for(predicate: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.05, what: str = "") -> T:
    """Return ``predicate()``'s first truthy value; ``AssertionError`` if none before ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        _tick.wait(interval)
