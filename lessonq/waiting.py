"""A bounded poll for the Block overflow policy (a producer waits for a free slot, as chatcli's does)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

_never = threading.Event()


def poll(predicate: Callable[[], bool], *, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        _never.wait(min(interval, max(deadline - time.monotonic(), 0)))
