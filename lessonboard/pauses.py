"""Pause and resume a queue during an incident (docs/operations.md#pause-and-resume).

A paused queue's work waits, as it does while the LLM is down: lesson jobs stay in the WAL undispatched
(one already dispatched is parked by the worker with its attempt given back), refine runs stay queued. A
pause is a ``QueuePause`` row, so it survives a restart of every process; each pause and resume is an audit
event. Workers read the pauses at most ``CACHE_SECONDS`` old (a pause reaches every process within that);
resuming sweeps every node, so what waited is dispatched at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, transaction

# name → what it holds back. "llm" is every piece of LLM work at once.
QUEUES: dict[str, str] = {
    "llm": "all LLM work (lesson jobs, refine runs, doc2query phrasings)",
    "lessonq": "lesson jobs (every node's lessonq.<node> queue)",
    "refine": "refine runs",
}
CACHE_SECONDS = 2.0

_lock = threading.Lock()
_cache: tuple[float, dict[str, Pause]] | None = None


@dataclass(frozen=True)
class Pause:
    name: str
    paused_at: datetime
    by: str
    reason: str

    @property
    def text(self) -> str:
        what = "all LLM work" if self.name == "llm" else f"queue {self.name}"
        tail = f": {self.reason}" if self.reason else ""
        since = self.paused_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"paused: {what}, by {self.by} since {since}{tail}"


def forget() -> None:
    global _cache
    with _lock:
        _cache = None


def current() -> dict[str, Pause]:
    """The pauses in force (cached for ``CACHE_SECONDS`` in this process)."""
    global _cache
    now = time.monotonic()
    with _lock:
        if _cache is not None and now - _cache[0] < CACHE_SECONDS:
            return _cache[1]
    from lessonboard.models import QueuePause

    try:
        rows = list(QueuePause.objects.select_related("paused_by", "paused_by_token"))
    except DatabaseError:  # no database: nothing is known to be paused (the work fails on the database anyway)
        return {}
    found = {
        row.name: Pause(
            name=row.name,
            paused_at=row.paused_at,
            by=(
                row.paused_by.get_username()
                if row.paused_by
                else (f"token {row.paused_by_token.name}" if row.paused_by_token else "someone")
            ),
            reason=row.reason,
        )
        for row in rows
    }
    with _lock:
        _cache = (now, found)
    return found


def reason(queue: str) -> str:
    """Why ``queue``'s work must wait because of a pause ("" when it may run): its own, or "llm"."""
    pauses = current()
    pause = pauses.get(queue) or pauses.get("llm")
    return pause.text if pause is not None else ""


def unavailable_reason(queue: str) -> str:
    """Why ``queue``'s LLM work must wait now: a pause, no LLM configured, or an outage ("" to run)."""
    from lessonboard import llm

    return reason(queue) or llm.unavailable_reason()


def _actor(user: Any = None, token: Any = None) -> dict[str, Any]:
    return {"user": user if user is not None and user.is_authenticated else None, "token": token}


def pause(name: str, *, user: Any = None, token: Any = None, why: str = "") -> bool:
    """Pause ``name``; False when it was paused already (nothing recorded)."""
    from lessonboard.models import AuditEvent, QueuePause

    if name not in QUEUES:
        raise ValueError(f"no queue {name!r} (one of {', '.join(QUEUES)})")
    actor = _actor(user, token)
    with transaction.atomic():
        _, created = QueuePause.objects.get_or_create(
            name=name, defaults={"paused_by": actor["user"], "paused_by_token": actor["token"], "reason": why[:300]}
        )
        if created:
            AuditEvent.record(
                "queue.pause", **actor, object_type="queue", object_ids=[name], reason=why[:300], result={"paused": 1}
            )
    forget()
    return created


def resume(name: str, *, user: Any = None, token: Any = None) -> bool:
    """Resume ``name`` and dispatch what waited; False when it was not paused."""
    from lessonboard.models import AuditEvent, QueuePause

    if name not in QUEUES:
        raise ValueError(f"no queue {name!r} (one of {', '.join(QUEUES)})")
    with transaction.atomic():
        deleted, _ = QueuePause.objects.filter(name=name).delete()
        if deleted:
            AuditEvent.record(
                "queue.resume", **_actor(user, token), object_type="queue", object_ids=[name], result={"resumed": 1}
            )
            transaction.on_commit(_dispatch_what_waited, robust=True)
    forget()
    return bool(deleted)


def _dispatch_what_waited() -> None:
    """As when the LLM breaker closes: every node is swept and waiting refine runs are published again."""
    from lessonboard import breaker

    for hook in breaker.RECOVERY_HOOKS:
        hook()


def states() -> list[dict[str, Any]]:
    """For the Overview: each pausable queue, paused or not."""
    pauses = current()
    return [{"name": name, "holds": holds, "pause": pauses.get(name)} for name, holds in QUEUES.items()]


def readiness() -> tuple[bool, str]:
    """For ``/readyz``: a pause is an operator's decision, not a failure (ready, with the detail)."""
    pauses = current()
    if not pauses:
        return True, "nothing paused"
    return True, "; ".join(p.text for p in pauses.values())
