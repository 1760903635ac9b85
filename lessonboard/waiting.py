"""Waiting with a deadline: the project's one poll loop (the embedded database's start, the queue's Block
policy, the refine API's wait, and the tests' ``wait_for``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_never_set = threading.Event()


def sleep(seconds: float) -> None:
    """A sleep between two looks, and nothing else: the one ``poll`` hides, named as what it is (an
    event nobody sets, so it cannot end early by accident). Tests replace it to poll without waiting."""
    _never_set.wait(seconds)


def poll(predicate: Callable[[], T], *, timeout: float, interval: float = 0.1) -> T:
    """``predicate()``'s first truthy value, looking every ``interval`` seconds; its last (falsy) value
    once ``timeout`` seconds have passed. It looks at least once, and once more at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        remaining = deadline - time.monotonic()
        if value or remaining <= 0:
            return value
        sleep(min(interval, remaining))
