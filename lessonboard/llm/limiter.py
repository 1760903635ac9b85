"""Calls in flight per node: at most LLM_CONCURRENCY chat calls at once to one provider and model
(LLM_CONCURRENCY_BY_MODEL for a model of its own), across every process of the node — web and workers.

The slots are lock files in the node's data directory (``<DATA_DIR>/llm-slots/<key>/<n>.lock``), held
with ``flock`` for the length of one call: the kernel drops a dead process's locks (kill -9 leaks no
slot), every process of the machine sees the same slots, and taking one is a few system calls, with no
database round trip. A worker's call waits for a slot (up to LLM_SLOT_WAIT); a web request never waits
(``no_wait``): a full node answers it at once with ``LLMSaturated`` (the API says 503 with Retry-After).

The number of slots a caller may take adapts (AIMD, as TCP finds a link's capacity): it starts at the
configured limit (the ceiling); every answered call adds ``INCREASE / allowed`` (one slot more per
``allowed`` answers), every rate-limit answer (429, 503 + Retry-After) or timeout multiplies it by ``DECREASE``, never
below ``FLOOR``. Only a call that asked for its slot after the last cut can cut again, so the 16 rate-limit
answers of one burst halve the limit once, not sixteen times (a call that waited for its slot through the
cut belongs to the burst it queued behind). The value lives in ``<slot dir>/aimd`` (a float and the
time of the last cut), rewritten whole with ``os.replace`` under ``flock`` on ``aimd.lock``: every process
of the node reads the same limit, a killed writer leaves the old value or the new one, never half a file,
and the kernel drops its lock. Held slots above a lowered limit finish their call; new callers only take
slots below it. The healthy path at the ceiling writes nothing.

A web process also keeps its own threads free: ``web_call`` lets at most ``web_share()`` of its requests
(half of LESSONBOARD_WEB_THREADS) do LLM work at once, so the node's slots can never all land in one web
process and hold every thread its /healthz and pages need; one over the share is refused at once
(``WebShareFull``).
"""

from __future__ import annotations

import contextvars
import fcntl
import hashlib
import logging
import os
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from lessonboard.llm.errors import LLMSaturated

log = logging.getLogger(__name__)


class NoWait:
    """What ``no_wait`` hands back: whether a call inside was refused for want of a slot."""

    refused = False


_NO_WAIT: contextvars.ContextVar[NoWait | None] = contextvars.ContextVar("llm_no_wait", default=None)
RETRY_AFTER = 1  # seconds a refused web request is told to wait


INCREASE = 1.0  # slots added per window of answered calls (each answer adds INCREASE / whole allowed)
DECREASE = 0.5  # the allowed slots are multiplied by this on a rate-limit answer or a timeout
FLOOR = 1  # never fewer slots than this

__all__ = [
    "Held",
    "LLMSaturated",
    "NoWait",
    "WebShareFull",
    "allowed",
    "allowed_exact",
    "answered",
    "cut_text",
    "in_use",
    "known_models",
    "limit_for",
    "no_wait",
    "overloaded",
    "reset",
    "saturated",
    "slot",
    "states",
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


def _state(folder: Path, ceiling: int) -> tuple[float, float]:
    """The adaptive limit ``(allowed, last cut as a Unix time)``; the ceiling when none was written."""
    try:
        value, _, cut = (folder / "aimd").read_text().partition(" ")
        allowed, cut_at = float(value), float(cut or 0)
    except (OSError, ValueError):
        return float(ceiling), 0.0
    return min(max(allowed, float(FLOOR)), float(ceiling)), cut_at


def _write(folder: Path, allowed: float, cut_at: float) -> None:
    tmp = folder / f".aimd.{os.getpid()}.tmp"
    tmp.write_text(f"{allowed!r} {cut_at!r}")
    os.replace(tmp, folder / "aimd")


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / "aimd.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def allowed(model: str) -> int:
    """How many of the node's slots for ``model`` a caller may take now (the adaptive limit, whole)."""
    ceiling = limit_for(model)
    return max(int(_state(slot_dir(model), ceiling)[0]), FLOOR)


def allowed_exact(model: str) -> float:
    """The adaptive limit with its fraction (for the gauge and tests)."""
    return _state(slot_dir(model), limit_for(model))[0]


def answered(model: str) -> None:
    """A call was answered: additive increase, up to the ceiling (nothing written at the ceiling)."""
    ceiling, folder = limit_for(model), slot_dir(model)
    if _state(folder, ceiling)[0] >= ceiling:
        return
    with _locked(folder):
        value, cut_at = _state(folder, ceiling)
        if value < ceiling:
            window = max(int(value), FLOOR)  # one slot more per ``window`` answers at this limit
            grown = value + INCREASE / window
            if abs(grown - round(grown)) < 1e-6:  # 3 + 1/3 + 1/3 + 1/3 makes 4, not 3.999…
                grown = float(round(grown))
            _write(folder, min(grown, float(ceiling)), cut_at)


def overloaded(model: str, started: float) -> None:
    """A call that started at ``started`` (Unix time) got a rate-limit answer or timed out: multiplicative
    decrease, unless a cut already happened after it started (one burst cuts once)."""
    from lessonboard.metrics import LLM_CONCURRENCY_CUTS

    ceiling, folder = limit_for(model), slot_dir(model)
    with _locked(folder):
        value, cut_at = _state(folder, ceiling)
        if started < cut_at:
            return
        _write(folder, max(value * DECREASE, float(FLOOR)), time.time())
    LLM_CONCURRENCY_CUTS.inc()


def known_models() -> list[str]:
    """The models this node is configured to call (the gauges report one series each)."""
    names = [settings.LLM_MODEL, getattr(settings, "REFINE_MODEL", "")]
    names += [item.partition("=")[0].strip() for item in settings.LLM_CONCURRENCY_BY_MODEL]
    return list(dict.fromkeys(name for name in names if name))


def states() -> list[tuple[str, int, int]]:
    """``(model, allowed, ceiling)`` for every model this node is configured to call."""
    return [(model, allowed(model), limit_for(model)) for model in known_models()]


def cut_text() -> str:
    """Which models run below their ceiling now ("" when none): for /readyz and the Overview."""
    cut = [f"{model}: {now} of {ceiling} calls in flight allowed" for model, now, ceiling in states() if now < ceiling]
    return "adaptive concurrency cut after rate limits or timeouts — " + "; ".join(cut) if cut else ""


def reset(model: str) -> None:
    """Forget the adaptive limit for ``model``: back to the ceiling (tests; a node's fresh start keeps it)."""
    with _locked(slot_dir(model)):
        (slot_dir(model) / "aimd").unlink(missing_ok=True)


def saturated(model: str) -> bool:
    """Every slot a caller may take for ``model`` is held now (a web request checks before it starts)."""
    return in_use(model) >= allowed(model)


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


class Held:
    """A slot held for one call: the gateway marks it ``overload`` on a rate-limit answer or a timeout,
    ``answered`` when the endpoint answered; the slot adapts the limit when it is given back. ``started``:
    when the call asked for its slot (Unix time), which decides whether its overload may cut again;
    ``waited``: no slot was free when it asked (the gateway looks at the rate-limit pause again)."""

    def __init__(self, model: str, started: float | None = None, *, waited: bool = False) -> None:
        self.model = model
        self.started = time.time() if started is None else started
        self.waited = waited
        self.outcome = ""  # "answered", "overload" or "" (another error: the limit stays)


@contextmanager
def slot(model: str, *, wait: float | None = None) -> Iterator[Held]:
    """Hold one of the node's slots for ``model`` for the length of the block; ``LLMSaturated`` when none
    frees within ``wait`` seconds (0 inside ``no_wait``; LLM_SLOT_WAIT by default). The ``Held`` handed
    back carries the call's outcome, which adapts the limit (AIMD) when the block ends."""
    from lessonboard.metrics import LLM_CALLS_IN_FLIGHT, LLM_SATURATED

    asked = time.time()  # a call that waits through a cut is of the burst that made it: it cuts no more
    limit = allowed(model)
    folder = slot_dir(model)
    folder.mkdir(parents=True, exist_ok=True)
    guard = _NO_WAIT.get()
    if wait is None:
        wait = 0.0 if guard is not None else float(settings.LLM_SLOT_WAIT)
    deadline = time.monotonic() + wait
    pause = 0.005
    fd = _try_take(folder, limit)
    waited = fd is None
    while fd is None:
        if time.monotonic() >= deadline:
            LLM_SATURATED.inc()
            if guard is not None:
                guard.refused = True
            raise LLMSaturated(f"all {limit} LLM call slots of this node for {model} are in use; try again shortly")
        time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
        pause = min(pause * 2, 0.1)
        limit = allowed(model)  # the limit may have grown (or shrunk) while this caller waited
        fd = _try_take(folder, limit)
    LLM_CALLS_IN_FLIGHT.inc()
    held = Held(model, started=asked, waited=waited)
    try:
        yield held
    finally:
        LLM_CALLS_IN_FLIGHT.dec()
        os.close(fd)  # closing the last descriptor releases the lock
        try:
            if held.outcome == "overload":
                overloaded(model, held.started)
            elif held.outcome == "answered":
                answered(model)
        except OSError as exc:  # bookkeeping: the call's own outcome stands
            log.warning("llm limiter: cannot adapt the limit for %s: %s", model, exc)
