"""Calls in flight per node: at most LLM_CONCURRENCY chat calls at once to one provider and model
(LLM_CONCURRENCY_BY_MODEL for a model of its own), across every process of the node — web and workers.

The slots are lock files in the node's data directory (``<DATA_DIR>/llm-slots/<key>/<n>.lock``), held
with ``flock`` for the length of one call: the kernel drops a dead process's locks (kill -9 leaks no
slot), every process of the machine sees the same slots, and taking one is a few system calls, with no
database round trip. A worker's call waits for a slot (up to LLM_SLOT_WAIT); a web request never waits
(``no_wait``): a full node answers it at once with ``LLMSaturated`` (the API says 503 with Retry-After).
"""

from __future__ import annotations

import contextvars
import fcntl
import hashlib
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from lessonboard.llm.errors import LLMSaturated


class NoWait:
    """What ``no_wait`` hands back: whether a call inside was refused for want of a slot."""

    refused = False


_NO_WAIT: contextvars.ContextVar[NoWait | None] = contextvars.ContextVar("llm_no_wait", default=None)
RETRY_AFTER = 1  # seconds a refused web request is told to wait


__all__ = ["LLMSaturated", "NoWait", "in_use", "limit_for", "no_wait", "saturated", "slot"]


def limit_for(model: str) -> int:
    """The node's slots for ``model``: its entry in LLM_CONCURRENCY_BY_MODEL, else LLM_CONCURRENCY."""
    for item in settings.LLM_CONCURRENCY_BY_MODEL:
        name, _, value = item.partition("=")
        if name.strip() == model and value.strip().isdigit():
            return max(int(value), 1)
    return max(int(settings.LLM_CONCURRENCY), 1)


def slot_dir(model: str) -> Path:
    key = hashlib.sha256(f"{settings.LLM_BASE_URL}|{model}".encode()).hexdigest()[:16]
    return Path(settings.DATA_DIR) / "llm-slots" / key


@contextmanager
def no_wait() -> Iterator[NoWait]:
    """Calls made inside never wait for a slot (a web request): a full node refuses them at once, and
    the ``NoWait`` handed back says so afterwards."""
    guard = NoWait()
    token = _NO_WAIT.set(guard)
    try:
        yield guard
    finally:
        _NO_WAIT.reset(token)


def _try_take(folder: Path, limit: int) -> int | None:
    order = list(range(limit))
    random.shuffle(order)  # callers spread over the slots instead of all knocking on slot 0 first
    for index in order:
        fd = os.open(folder / f"{index}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return fd
    return None


def saturated(model: str) -> bool:
    """Every slot for ``model`` is held now (a web request checks before it starts anything)."""
    return in_use(model) >= limit_for(model)


def in_use(model: str) -> int:
    """How many of the node's slots for ``model`` are held now (for pages and tests)."""
    folder, taken = slot_dir(model), 0
    for index in range(limit_for(model)):
        path = folder / f"{index}.lock"
        if not path.exists():
            continue
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            taken += 1
        finally:
            os.close(fd)
    return taken


@contextmanager
def slot(model: str, *, wait: float | None = None) -> Iterator[None]:
    """Hold one of the node's slots for ``model`` for the length of the block; ``LLMSaturated`` when none
    frees within ``wait`` seconds (0 inside ``no_wait``; LLM_SLOT_WAIT by default)."""
    from lessonboard.metrics import LLM_CALLS_IN_FLIGHT, LLM_SATURATED

    limit = limit_for(model)
    folder = slot_dir(model)
    folder.mkdir(parents=True, exist_ok=True)
    guard = _NO_WAIT.get()
    if wait is None:
        wait = 0.0 if guard is not None else float(settings.LLM_SLOT_WAIT)
    deadline = time.monotonic() + wait
    pause = 0.005
    fd = _try_take(folder, limit)
    while fd is None:
        if time.monotonic() >= deadline:
            LLM_SATURATED.inc()
            if guard is not None:
                guard.refused = True
            raise LLMSaturated(f"all {limit} LLM call slots of this node for {model} are in use; try again shortly")
        time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
        pause = min(pause * 2, 0.1)
        fd = _try_take(folder, limit)
    LLM_CALLS_IN_FLIGHT.inc()
    try:
        yield
    finally:
        LLM_CALLS_IN_FLIGHT.dec()
        os.close(fd)  # closing the last descriptor releases the lock
