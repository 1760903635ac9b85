"""Node failover (docs/architecture.md#node-failover): node leases, adoption of a dead node's jobs, fencing.

A node is its lesson worker plus its WAL directory, so the node's lease is kept by that worker's main
process (``Keeper``), never by beat (the beat that leads the schedule may run on any node). The keeper
acquires the lease when the worker is ready, renews it every LESSONQ_NODE_LEASE_RENEW to
LESSONQ_NODE_LEASE ahead (database time, so hosts' clocks do not matter) and, with LESSONQ_FAILOVER on,
adopts the jobs of peers whose lease has run out.

Adoption of a dead node's jobs, one batch per transaction on the adopter:
  lock the dead node's lease row (``FOR UPDATE SKIP LOCKED``, still expired) → lock up to ADOPT_BATCH of
  its active job rows (``SKIP LOCKED``) → write their WAL records, rebuilt from the rows (a row holds the
  whole request), into the adopter's WAL under the same JobIDs → move the rows to the adopter,
  undispatched (the messages its dispatcher still owed for them dropped), the dead node's claims ended →
  bump the lease's epoch → commit.
Then the adopter's sweep dispatches them within its capacity (``LESSONQ_CAPACITY``), never all at once.
The dead node's dead jobs follow, the same way: their DLQ records, rebuilt from the rows, go into the
adopter's DLQ and the rows move to the adopter, so the triage pages can retry or purge them there (a
retry needs the job's DLQ record on the node its row names).

The row wins every disagreement: a crash between the WAL write and the commit leaves records whose rows
still name the dead node; the adopter's sweep moves them out of its WAL or DLQ (``_reconcile_wal_record``,
``_reconcile_dlq``) and the next adoption writes them again. A record missing after the commit is rewritten from its row by the
sweep (active row, no record).

Fencing: a worker claims only rows that name its node (``Job.claim``), and records an outcome only while
the row still names its node and its claim (``ensure_ours``, in the outcome's transaction), so a node
that was adopted from cannot process, finish or duplicate those jobs. When it comes back, its renewal
matches no lease (the epoch moved on) or it starts afresh with a new epoch, and its sweep or replay moves
the WAL records of adopted jobs out of its WAL instead of turning them into rows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from lessonq import faults, metrics
from lessonq.models import ACTIVE, Job, JobState, NodeAdoption, NodeLease, Outbox, worker_identity
from lessonq.paths import dlq, wal
from lessonq.wal import Wal, WalError, WalJob

log = logging.getLogger(__name__)

# Rows adopted per transaction: each holds a whole request (payloads up to MAX_PAYLOAD), all in memory.
ADOPT_BATCH = 100


class Fenced(Exception):
    """The job's row no longer names this node and this worker's claim: another node adopted it."""


class LeaseLost(Exception):
    """This node's lease moved to a new epoch while its keeper was busy (another node adopted from it)."""


@dataclass(frozen=True)
class Acquired:
    epoch: int
    new: bool  # a new incarnation (the lease had run out), not a second process joining a live one
    adopted_by: str  # the node that adopted from this one since its last incarnation, if any
    adopted_at: datetime | None


# --- the lease ---------------------------------------------------------------------------------------------
def acquire(node: str | None = None) -> Acquired:
    """Take ``node``'s lease: join the current epoch while the lease is live (another process of the
    node renews it), else start a new epoch. Says whether the node was adopted from meanwhile."""
    node = node or settings.LESSONQ_QUEUE
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO queue_nodelease (node, epoch, holder, renewed_at, expires_at, adopted_by, adopted_jobs)"
            " VALUES (%s, 0, '', now(), now(), '', 0) ON CONFLICT (node) DO NOTHING",
            [node],
        )
        cursor.execute(
            "SELECT expires_at > now(), adopted_by, adopted_at FROM queue_nodelease WHERE node = %s FOR UPDATE",
            [node],
        )
        live, adopted_by, adopted_at = cursor.fetchone()
        cursor.execute(
            "UPDATE queue_nodelease SET epoch = epoch + %s, holder = %s, renewed_at = now(),"
            " expires_at = now() + make_interval(secs => %s), adopted_by = CASE WHEN %s THEN adopted_by ELSE '' END"
            " WHERE node = %s RETURNING epoch",
            [0 if live else 1, worker_identity(), settings.LESSONQ_NODE_LEASE, live, node],
        )
        (epoch,) = cursor.fetchone()
    if adopted_by and not live:
        log.warning(
            "lessonq: node %s was adopted from by %s at %s: this node's copies of the adopted jobs' records are"
            " moved aside to expired/ (they run there, not here); every record no node adopted is replayed",
            node,
            adopted_by,
            adopted_at,
        )
    return Acquired(epoch=int(epoch), new=not live, adopted_by=adopted_by if not live else "", adopted_at=adopted_at)


def renew(epoch: int, node: str | None = None) -> bool:
    """Extend the lease held at ``epoch``; ``False`` when the epoch is stale (the node was adopted from)."""
    node = node or settings.LESSONQ_QUEUE
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_nodelease SET holder = %s, renewed_at = now(), expires_at = now() + make_interval(secs => %s)"
            " WHERE node = %s AND epoch = %s",
            [worker_identity(), settings.LESSONQ_NODE_LEASE, node, epoch],
        )
        return cursor.rowcount == 1


def expire(node: str) -> bool:
    """End ``node``'s lease now (retiring a stopped node): the next keeper of a live node adopts its jobs."""
    return bool(NodeLease.objects.filter(node=node).update(expires_at=Now()))


# --- adoption ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    """What is adopted: the label of ``lessonboard_lessonq_adopted_jobs_total`` and the rows' states."""

    label: str
    states: tuple[str, ...]


ACTIVE_KIND = Kind("active", tuple(ACTIVE))
DEAD_KIND = Kind("dead", (JobState.DEAD,))


def adopt_expired(
    *,
    into: str | None = None,
    target: Wal | None = None,
    dead_target: Wal | None = None,
    between: Callable[[], None] | None = None,
) -> int:
    """Adopt the jobs of every other node whose lease has run out; how many were adopted. ``between`` runs
    after each batch (the keeper renews its own lease there: a big backlog takes longer than a lease)."""
    into = into or settings.LESSONQ_QUEUE
    # Epoch 0: only the node's web has written the row (``lessonq.presence``), no worker ever held it.
    dead = NodeLease.objects.exclude(node=into).filter(expires_at__lt=Now(), epoch__gt=0).values_list("node", flat=True)
    return sum(adopt(node, into=into, target=target, dead_target=dead_target, between=between) for node in list(dead))


def adopt(
    node: str,
    *,
    into: str | None = None,
    target: Wal | None = None,
    dead_target: Wal | None = None,
    force: bool = False,
    between: Callable[[], None] | None = None,
) -> int:
    """Move ``node``'s active jobs (records into ``target``, this node's WAL by default), then its dead
    jobs (records into ``dead_target``, this node's DLQ), to ``into`` (this node by default), batch by
    batch, while its lease stays expired (``force``: whatever the lease says — a retirement). Exactly once
    across concurrent adopters: each batch holds the lease row's lock, and rows already moved no longer
    name ``node``. Returns how many jobs were adopted, of both kinds."""
    into = into or settings.LESSONQ_QUEUE
    if node == into:
        return 0
    total = 0
    for kind, folder in (ACTIVE_KIND, target or wal()), (DEAD_KIND, dead_target or dlq()):
        while True:
            moved = _adopt_batch(node, into, folder, kind, force=force)
            total += moved
            if between is not None:
                between()
            if moved < ADOPT_BATCH:
                break
    return total


def _adopt_batch(node: str, into: str, target: Wal, kind: Kind, *, force: bool) -> int:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT LEAST(expires_at, now()) FROM queue_nodelease WHERE node = %s AND (expires_at < now() OR %s)"
            " FOR UPDATE SKIP LOCKED",
            [node, force],
        )
        lease = cursor.fetchone()
        if lease is None:  # live again, or another adopter holds it right now
            return 0
        lease_end = lease[0]
        jobs = list(
            Job.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("workspace")  # each record names its workspace (WalJob.workspace)
            .filter(node=node, state__in=kind.states)
            .order_by("enqueued_at")[:ADOPT_BATCH]
        )
        if not jobs:
            return 0
        ids = write_records(target, jobs)
        if not ids:
            return 0
        faults.point("failover.after_wal")
        now = timezone.now()
        if kind is DEAD_KIND:
            # A dead job stays dead, finished when it was: only its node (where its DLQ record now is) changes.
            Job.objects.filter(pk__in=ids).update(node=into, updated_at=now)
        else:
            Job.objects.filter(pk__in=ids).update(
                node=into,
                dispatched_at=None,
                redispatches=0,
                waiting_reason=f"adopted from {node}"[:300],
                updated_at=now,
            )
            # The dead node's claims ended with its lease: the next claim takes the job over and counts the
            # lost attempt (``Job.claim``), whatever host the claim names.
            Job.objects.filter(pk__in=ids, state=JobState.RUNNING).update(claim_expires_at=lease_end)
            # Messages the dead node's dispatcher still owed for them: its dispatcher is gone, and the
            # adopter's sweep dispatches the adopted jobs itself.
            Outbox.objects.filter(job_id__in=ids).delete()
        cursor.execute(
            "UPDATE queue_nodelease SET epoch = epoch + 1, adopted_by = %s, adopted_at = now(),"
            " adopted_jobs = adopted_jobs + %s, expires_at = LEAST(expires_at, now()) WHERE node = %s RETURNING epoch",
            [into, len(ids), node],
        )
        (epoch,) = cursor.fetchone()
        # The record of who adopted whose jobs (the Overview's and /readyz's "adopted by").
        NodeAdoption.objects.create(from_node=node, into_node=into, kind=kind.label, jobs=len(ids), epoch=epoch)
    faults.point("failover.after_commit")
    metrics.ADOPTED_JOBS.labels(from_node=node, kind=kind.label).inc(len(ids))
    log.warning("lessonq: adopted %d %s job(s) of node %s (lease expired) into %s", len(ids), kind.label, node, into)
    return len(ids)


def write_records(target: Wal, jobs: list[Job]) -> list[str]:
    """The jobs' WAL records, from their rows, durable in ``target``; the ids written. A record already
    there (an adoption that died before its commit) is overwritten: the row wins. A row that cannot
    become a record stays with its node, logged, so it does not block the others."""
    records = [job.wal_job() for job in jobs]
    try:
        created = target.append_many(records)
    except WalError:
        return [r.id for r in records if _write_one(target, r)]
    for record, new in zip(records, created, strict=True):
        if not new:
            target.update(record)
    return [r.id for r in records]


def _write_one(target: Wal, record: WalJob) -> bool:
    try:
        if not target.append(record):
            target.update(record)
    except WalError as exc:
        log.error("lessonq: job %s cannot be adopted (its row cannot become a WAL record): %s", record.id, exc)
        return False
    return True


# --- fencing -----------------------------------------------------------------------------------------------
def ensure_ours(job: Job) -> None:
    """Inside the transaction that records an attempt's outcome: lock the row and check that it still
    names this node and this worker's claim; ``Fenced`` otherwise (the job was adopted meanwhile)."""
    row = Job.objects.select_for_update().filter(pk=job.pk).values("node", "claimed_by").first()
    if row is None or row["node"] != settings.LESSONQ_QUEUE or row["claimed_by"] != worker_identity():
        owner = row["node"] if row else "nobody"
        raise Fenced(f"job {job.pk} now belongs to {owner}; this worker's outcome is dropped")


def beat_for_this_worker() -> None:
    """The Overview's worker heartbeat, written by the worker itself at every renewal (beat's heartbeat
    task goes to the shared ``default`` queue, so whichever worker takes it is the one shown)."""
    from lessonboard.tasks import heartbeat

    heartbeat()


# --- the keeper ----------------------------------------------------------------------------------------------
class Keeper(threading.Thread):
    """The node's lease keeper, in the lesson worker's main process (it outlives the pool's children)."""

    def __init__(self) -> None:
        super().__init__(name="lessonq-lease", daemon=True)
        self.stopping = threading.Event()
        self.epoch: int | None = None
        self.renewed_at = 0.0  # time.monotonic() of the last renewal

    def keep_alive(self) -> None:
        """Between adoption batches: renew this node's lease when a renewal is due. Adopting a dead node's
        backlog (100,000 jobs, an fsync per record) outlasts a lease; unrenewed, this node would show as
        gone and a third node adopt from it. ``LeaseLost`` when this node was adopted from meanwhile: the
        adoption stops, and the next tick starts a new epoch."""
        if time.monotonic() - self.renewed_at < settings.LESSONQ_NODE_LEASE_RENEW:
            return
        if self.epoch is None or not renew(self.epoch):
            raise LeaseLost(f"this node's lease (epoch {self.epoch}) was lost while it adopted jobs")
        self.renewed_at = time.monotonic()

    def run(self) -> None:
        while not self.stopping.is_set():
            self.tick()
            self.stopping.wait(settings.LESSONQ_NODE_LEASE_RENEW)

    def tick(self) -> None:
        from lessonq import reconcile

        try:
            if self.epoch is None or not renew(self.epoch):
                stale = self.epoch
                acquired = acquire()
                self.epoch = acquired.epoch
                if stale is not None and acquired.adopted_by:
                    # Adopted from while alive (cut off for longer than the lease): the sweep moves the
                    # adopted jobs' records out of this node's WAL now (at a start, replay does it).
                    log.warning("lessonq: epoch %d of this node was stale; now at epoch %d", stale, self.epoch)
                    reconcile.sweep()
            self.renewed_at = time.monotonic()
            beat_for_this_worker()
            if settings.LESSONQ_FAILOVER and adopt_expired(between=self.keep_alive):
                self.keep_alive()
                reconcile.sweep()  # dispatches the adopted jobs within this node's capacity
        except Exception:
            log.exception(
                "lessonq: keeping the node lease failed; trying again in %ss", settings.LESSONQ_NODE_LEASE_RENEW
            )
        finally:
            close_old_connections()
