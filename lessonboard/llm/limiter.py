"""Calls in flight per node: at most LLM_CONCURRENCY chat calls at once to one provider and model
(LLM_CONCURRENCY_BY_MODEL for a model of its own), across every process of the node — web and workers.

The slots are lock files in the node's data directory (``<DATA_DIR>/llm-slots/<key>/<n>.lock``), held
with ``flock`` for the length of one call: the kernel drops a dead process's locks (kill -9 leaks no
slot), every process of the machine sees the same slots, and taking one is a few system calls, with no
database round trip. A worker's call waits for a slot (up to LLM_SLOT_WAIT); a web request never waits
(``no_wait``): a full node answers it at once with ``LLMSaturated`` (the API says 503 with Retry-After).

A web process also keeps its own threads free: ``web_call`` lets at most ``web_share()`` of its requests
(half of LESSONBOARD_WEB_THREADS) do LLM work at once, so the node's slots can never all land in one web
process and hold every thread its /healthz and pages need; one over the share is refused at once
(``WebShareFull``).
"""

from __future__ import annotations

import contextvars
import fcntl
import hashlib
import os
import random
import threading
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


__all__ = [
    "LLMSaturated",
    "NoWait",
    "WebShareFull",
    "in_use",
    "limit_for",
    "no_wait",
    "saturated",
    "slot",
    "web_call",
    "web_calls",
    "web_share",
]


class WebShareFull(LLMSaturated):
    """This web process already has ``web_share()`` requests doing LLM work: the request was not started."""


_web_lock = threading.Lock()
_web_calls = 0  # requests of this process inside ``web_call`` now


def web_share() -> int:
    """How many of one web process's requests may do LLM work at once: half its threads (at least 1)."""
    return max(int(settings.WEB_THREADS) // 2, 1)


def web_calls() -> int:
    """How many of this process's requests are inside ``web_call`` now (for tests and pages)."""
    return _web_calls


@contextmanager
def web_call() -> Iterator[NoWait]:
    """A web request's LLM work: one of this process's ``web_share()`` places, taken without waiting
    (``WebShareFull`` at once when none is free), and inside it ``no_wait`` (no call waits for a node slot)."""
    global _web_calls
    from lessonboard.metrics import LLM_SATURATED

    share = web_share()
    with _web_lock:
        if _web_calls >= share:
            full = True
        else:
            full = False
            _web_calls += 1
    if full:
        LLM_SATURATED.inc()
        raise WebShareFull(
            f"{share} requests of this web process already wait on the LLM (half its LESSONBOARD_WEB_THREADS, "
            "so its other threads stay free); try again shortly"
        )
    try:
        with no_wait() as guard:
            yield guard
    finally:
        with _web_lock:
            _web_calls -= 1


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
