"""Per-node health, from the nodes themselves (docs/operations.md#nodes).

Each node says it is alive in its own lease row (``queue_nodelease``): its lesson worker renews the lease
(``lessonq.failover.Keeper``, every ``LESSONQ_NODE_LEASE_RENEW``) and its web processes stamp
``web_seen_at`` as often (``WebPresence``, a thread of every gunicorn worker). Nothing here depends on
beat or on which worker takes a task from a shared queue, so a live node is never missing and a dead one
is never shown as answering. ``nodes()`` is what the Overview lists and ``/readyz`` reports on;
``NodeAdoption`` rows say who adopted whose jobs.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Count, Sum
from django.utils import timezone

from lessonq.models import Job, NodeAdoption, NodeLease

log = logging.getLogger(__name__)

# A node whose lease ran out longer ago than this is history (retired, renamed): still listed on the
# Overview, no longer reported by /readyz or lessonboard_lessonq_node_up.
GONE_REPORTED = timedelta(hours=24)

WEB_SEEN_SQL = (
    "INSERT INTO queue_nodelease (node, epoch, holder, renewed_at, expires_at, adopted_by, adopted_jobs,"
    " web_seen_at, web_holder) VALUES (%s, 0, '', now(), now(), '', 0, now(), %s)"
    " ON CONFLICT (node) DO UPDATE SET web_seen_at = now(), web_holder = EXCLUDED.web_holder"
)


def web_seen(node: str | None = None) -> None:
    """This web process is alive: stamp its node's row (created with epoch 0 if no worker has run yet)."""
    with connection.cursor() as cursor:
        cursor.execute(WEB_SEEN_SQL, [node or settings.LESSONQ_QUEUE, f"{socket.gethostname()}:{os.getpid()}"])


class WebPresence(threading.Thread):
    """Started in each gunicorn worker (``lessonboard.gunicorn_conf.post_worker_init``)."""

    def __init__(self) -> None:
        super().__init__(name="lessonq-web-presence", daemon=True)
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                web_seen()
            except Exception as exc:  # the database is down: /readyz says so; try again at the next tick
                log.debug("lessonq: cannot stamp this web's presence: %s", exc)
            finally:
                close_old_connections()
            self.stopping.wait(settings.LESSONQ_NODE_LEASE_RENEW)


@dataclass(frozen=True)
class Adoption:
    into_node: str
    from_node: str
    jobs: int
    at: datetime


@dataclass(frozen=True)
class NodeState:
    node: str  # the queue name, lessonq.<node>
    epoch: int
    worker_live: bool
    worker_started: bool  # a worker has held the lease at least once (epoch > 0)
    holder: str
    renewed_at: datetime
    expires_at: datetime
    web_live: bool
    web_seen_at: datetime | None
    adopted_by: str  # the last node that adopted its jobs
    adopted_at: datetime | None
    adoptions_suffered: int  # jobs adopted from it, in all
    adoptions_made: int  # jobs it adopted from other nodes, in all
    active_jobs: int  # jobs whose rows still name it (pending, running, waiting)

    @property
    def name(self) -> str:
        return self.node.removeprefix("lessonq.")

    @property
    def gone(self) -> bool:
        """Its worker held the lease once and the lease ran out, within GONE_REPORTED."""
        return self.worker_started and not self.worker_live and timezone.now() - self.expires_at < GONE_REPORTED

    @property
    def worker_text(self) -> str:
        if not self.worker_started:
            return "no worker has held the lease yet"
        if self.worker_live:
            return f"alive (lease epoch {self.epoch}, renewed by {self.holder})"
        return f"gone: lease ran out at {_when(self.expires_at)} (last renewal by {self.holder})"

    @property
    def web_text(self) -> str:
        if self.web_seen_at is None:
            return "no web process seen"
        return "alive" if self.web_live else f"not seen since {_when(self.web_seen_at)}"

    @property
    def adoption_text(self) -> str:
        if not self.adopted_by:
            return f"its {self.active_jobs} active job(s) wait for adoption" if self.active_jobs else "nothing to adopt"
        return (
            f"its jobs were adopted by {self.adopted_by} (last at {_when(self.adopted_at)};"
            f" {self.adoptions_suffered} job(s) adopted from it in all)"
        )


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "?"
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def nodes() -> list[NodeState]:
    """Every node that has a lease row, with its worker and web state and its adoptions; a few rows."""
    now = _db_now()
    fresh = timedelta(seconds=settings.LESSONQ_NODE_LEASE)
    made = dict(
        NodeAdoption.objects.values("into_node").annotate(n=Sum("jobs")).values_list("into_node", "n").order_by()
    )
    leases = list(NodeLease.objects.order_by("node"))
    # Jobs still waiting on a node whose worker is gone (none on a healthy deployment: a cheap query).
    active = _active_counts([x.node for x in leases if x.epoch > 0 and x.expires_at <= now])
    result = []
    for lease in leases:
        result.append(
            NodeState(
                node=lease.node,
                epoch=lease.epoch,
                worker_live=lease.epoch > 0 and lease.expires_at > now,
                worker_started=lease.epoch > 0,
                holder=lease.holder,
                renewed_at=lease.renewed_at,
                expires_at=lease.expires_at,
                web_live=lease.web_seen_at is not None and now - lease.web_seen_at < fresh,
                web_seen_at=lease.web_seen_at,
                adopted_by=lease.adopted_by,
                adopted_at=lease.adopted_at,
                adoptions_suffered=lease.adopted_jobs,
                adoptions_made=int(made.get(lease.node, 0) or 0),
                active_jobs=int(active.get(lease.node, 0)),
            )
        )
    return result


def _active_counts(nodes: list[str]) -> dict[str, int]:
    if not nodes:
        return {}
    rows = (
        Job.objects.active()
        .filter(node__in=nodes)
        .values("node")
        .annotate(n=Count("id"))
        .values_list("node", "n")
        .order_by()
    )
    return {node: n for node, n in rows}


def _db_now() -> datetime:
    """Database time: leases are written in it, so hosts' clocks do not matter."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    return now  # type: ignore[no-any-return]


def recent_adoptions(limit: int = 10) -> list[Adoption]:
    """The latest adoptions, one line per (adopter, adopted node), newest first."""
    seen: dict[tuple[str, str], Adoption] = {}
    for row in NodeAdoption.objects.order_by("-at")[: limit * 5]:
        key = (row.into_node, row.from_node)
        if key in seen:
            prev = seen[key]
            seen[key] = Adoption(prev.into_node, prev.from_node, prev.jobs + row.jobs, prev.at)
        else:
            seen[key] = Adoption(row.into_node, row.from_node, row.jobs, row.at)
    return list(seen.values())[:limit]


def check_nodes() -> tuple[bool, str]:
    """``/readyz`` (advisory): every node whose worker is gone, and whose jobs were adopted by whom."""
    try:
        states = nodes()
    except Exception as exc:
        return False, f"cannot read the node leases: {exc}"
    gone = [s for s in states if s.gone]
    alive = [s for s in states if s.worker_live]
    if not gone:
        if not alive:
            return True, "no node has started its worker yet"
        return True, f"{len(alive)} node(s) alive: " + ", ".join(s.name for s in alive)
    parts = [f"node {s.name} is gone ({s.worker_text}); {s.adoption_text}" for s in gone]
    return False, "; ".join(parts)
