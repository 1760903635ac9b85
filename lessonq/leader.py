"""No single scheduler (docs/operations.md#scheduler): run beat on every node; only the beat process that
holds the leader lease sends the periodic tasks (sweeps and the re-publish of lost messages, the LLM
breaker's probe, retention, embedding catch-up, heartbeats).

The lease is one row (``queue_leaderlease``) taken and renewed by a single conditional upsert in database
time: the holder renews it every ``LESSONQ_NODE_LEASE_RENEW`` to ``LESSONQ_NODE_LEASE`` ahead, and
another beat takes it over only once it has run out, so when the leader's node dies the schedule goes on
from another node within one lease period. A leader that stops cleanly hands the lease back at once. A
standby beat keeps its schedule but sends nothing; a leader that cannot renew (the database is down, or
it was paused past its lease and replaced) stops sending until it holds the lease again. Two leaders
cannot overlap by more than one renewal interval, and every periodic task is safe to run twice.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery.beat import PersistentScheduler
from django.conf import settings
from django.db import close_old_connections, connection

log = logging.getLogger(__name__)

NAME = "scheduler"

HOLD_SQL = """
INSERT INTO queue_leaderlease (name, holder, node, epoch, acquired_at, renewed_at, expires_at)
VALUES (%(name)s, %(holder)s, %(node)s, 1, now(), now(), now() + make_interval(secs => %(lease)s))
ON CONFLICT (name) DO UPDATE SET
  epoch = queue_leaderlease.epoch + CASE WHEN queue_leaderlease.holder = EXCLUDED.holder THEN 0 ELSE 1 END,
  acquired_at = CASE WHEN queue_leaderlease.holder = EXCLUDED.holder
                     THEN queue_leaderlease.acquired_at ELSE now() END,
  holder = EXCLUDED.holder,
  node = EXCLUDED.node,
  renewed_at = now(),
  expires_at = EXCLUDED.expires_at
WHERE queue_leaderlease.holder = EXCLUDED.holder OR queue_leaderlease.expires_at < now()
RETURNING epoch
"""

RELEASE_SQL = "UPDATE queue_leaderlease SET expires_at = now() WHERE name = %s AND holder = %s"


def identity() -> str:
    return f"{settings.NODE}:{socket.gethostname()}:{os.getpid()}"


def hold(holder: str | None = None, name: str = NAME) -> int | None:
    """Take or renew the lease for ``holder`` (this process); its epoch, or ``None`` when another holds it."""
    with connection.cursor() as cursor:
        cursor.execute(
            HOLD_SQL,
            {
                "name": name,
                "holder": holder or identity(),
                "node": settings.LESSONQ_QUEUE,
                "lease": settings.LESSONQ_NODE_LEASE,
            },
        )
        row = cursor.fetchone()
    return int(row[0]) if row else None


def release(holder: str | None = None, name: str = NAME) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(RELEASE_SQL, [name, holder or identity()])
        return cursor.rowcount == 1


@dataclass(frozen=True)
class Leader:
    holder: str
    node: str
    epoch: int
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime
    live: bool
    age: float  # seconds since the last renewal

    @property
    def text(self) -> str:
        node = self.node.removeprefix("lessonq.")
        if self.live:
            return f"held by {self.holder} (node {node}, epoch {self.epoch}), renewed {int(self.age)} s ago"
        return (
            f"no scheduler: the lease of {self.holder} (node {node}) ran out {int(self.age)} s after its last "
            "renewal — is beat running on any node?"
        )


def state(name: str = NAME) -> Leader | None:
    """The leader lease as the Overview, /readyz and /metrics show it; ``None`` before any beat ran."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT holder, node, epoch, acquired_at, renewed_at, expires_at, expires_at > now(),"
            " EXTRACT(EPOCH FROM now() - renewed_at) FROM queue_leaderlease WHERE name = %s",
            [name],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    holder, node, epoch, acquired_at, renewed_at, expires_at, live, age = row
    return Leader(holder, node, int(epoch), acquired_at, renewed_at, expires_at, bool(live), float(age))


def check_scheduler() -> tuple[bool, str]:
    """``/readyz`` (advisory): does some beat hold the leader lease?"""
    try:
        leader = state()
    except Exception as exc:
        return False, f"cannot read the scheduler lease: {exc}"
    if leader is None:
        return False, "no beat has held the scheduler lease yet (run beat on at least one node)"
    return leader.live, leader.text


class LeaderScheduler(PersistentScheduler):
    """``celery beat --scheduler lessonq.leader:LeaderScheduler`` (the default, CELERY_BEAT_SCHEDULER):
    Celery's persistent scheduler, whose ticks send only while this process holds the leader lease."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import django
        from django.apps import apps

        if not apps.ready:  # beat's process: the lease is read and written through Django's connection
            django.setup()
        self.holder = identity()
        self.epoch: int | None = None
        self._next_check = 0.0
        self._checked = False
        super().__init__(*args, **kwargs)

    def leading(self) -> bool:
        now = time.monotonic()
        if now < self._next_check:
            return self.epoch is not None
        self._next_check = now + settings.LESSONQ_NODE_LEASE_RENEW
        was = self.epoch
        try:
            self.epoch = hold(self.holder)
        except Exception as exc:  # the database is down: a leader that cannot renew stops sending
            log.warning("lessonq: cannot take or renew the scheduler lease (not sending): %s", exc)
            self.epoch = None
        finally:
            close_old_connections()
        first, self._checked = not self._checked, True
        if self.epoch is None and first:
            log.warning("lessonq: this beat (%s) stands by: another beat holds the scheduler lease", self.holder)
        if self.epoch is not None and was is None:
            log.warning("lessonq: this beat (%s) holds the scheduler lease, epoch %d: sending", self.holder, self.epoch)
        elif self.epoch is None and was is not None:
            log.warning("lessonq: this beat (%s) lost the scheduler lease: standing by", self.holder)
        return self.epoch is not None

    def tick(self, *args: Any, **kwargs: Any) -> float:
        renew = float(settings.LESSONQ_NODE_LEASE_RENEW)
        if not self.leading():
            return renew  # stand by: look at the lease again in one renewal interval
        return min(float(super().tick(*args, **kwargs)), max(self._next_check - time.monotonic(), 0.01))

    def close(self) -> None:
        if self.epoch is not None:
            try:
                release(self.holder)
                log.warning("lessonq: this beat (%s) handed the scheduler lease back", self.holder)
            except Exception as exc:
                log.warning("lessonq: cannot hand the scheduler lease back (it runs out by itself): %s", exc)
            finally:
                close_old_connections()
            self.epoch = None
        super().close()
