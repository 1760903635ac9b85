"""Replay (worker start, ``reflect drain``) and the sweeper: bring this node's WAL files and job rows
back to the invariant (docs/architecture.md#invariant) and (re)dispatch what is due.

| file state        | row state                                   |
| wal/<id>.wal      | pending / running / retry_wait              |
| dlq/<id>.wal      | dead                                        |
| no file           | succeeded / skipped / purged; expired (record archived under expired/) |

Repairs, each for one crash point of an effect order:
- WAL record, no row (database down at ingest, or crash before the insert) → adopt the record as a row;
- WAL record + finished row (crash after the success commit) → unlink the WAL record;
- WAL record + dead row (crash after the DLQ move's commit) → unlink the WAL record;
- WAL + DLQ record + running row with a dead claim (crash after the DLQ put) → finish the DLQ move;
- DLQ record + pending row (DLQ retry crashed before unlinking the DLQ record) → unlink the DLQ record;
- DLQ record + purged/finished row (purge crashed before the unlink) → unlink it;
- DLQ record, no row → adopt it as a dead row;
- WAL or DLQ record whose row names another node (adopted from this node, or an adoption into this
  node died before its commit) → move the record aside to expired/;
- active row, no WAL record (a record lost by hand) → rewrite the record from the row;
- dead row, no DLQ record → rewrite the DLQ record from the row.
Rows a concurrent step holds locked are skipped (``select_for_update(skip_locked=True)``).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import psycopg
from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Least
from django.utils import timezone

from lessonboard.inputs import storable
from lessonq import metrics
from lessonq.dispatch import dispatch_many, publish, room
from lessonq.ingest import record_from_wal, senders
from lessonq.jobid import is_job_id
from lessonq.models import ACTIVE, DONE, PAYLOAD_FIELDS, WAITING, Job, JobState, claim_is_stale
from lessonq.paths import dlq, expired_dir, wal
from lessonq.wal import Listing, Wal, WalError, WalJob

log = logging.getLogger(__name__)
BATCH = 500
ADOPT_BATCH = 5000  # records adopted by one COPY (and one commit)
# The database is down or the connection broke: no record is at fault, stop the pass and retry later.
# Django's wrappers, and psycopg's own: an adoption COPY runs on the raw cursor, whose lost connection is not
# wrapped. A connection error is an outage, never a poison record (docs/operations.md#poison-records).
_OUTAGE = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)


@dataclass
class Report:
    dispatched: int = 0
    adopted: int = 0
    expired: int = 0
    repaired: int = 0
    quarantined: int = 0
    skipped_locked: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def add(self, other: Report) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)


def known_queues() -> list[str]:
    from lessonboard.models import WorkerHeartbeat

    queues = {settings.LESSONQ_QUEUE}
    queues.update(f"lessonq.{n}" for n in WorkerHeartbeat.objects.values_list("node", flat=True).distinct() if n)
    queues.update(Job.objects.active().values_list("node", flat=True).distinct())
    return sorted(queues)


def replay(*, now: datetime | None = None) -> Report:
    """Boot drain (docs/compat/chatcli.md#replay): reconcile, expire stale records, and dispatch every waiting job now
    (future retry times are pulled in, as chatcli does)."""
    return _reconcile(now=now or timezone.now(), pull_in=True)


def sweep(*, now: datetime | None = None) -> Report:
    """Periodic: reconcile, dispatch deferred jobs when room/LLM allow, re-publish due jobs whose
    message was lost, reclaim jobs whose claim died."""
    return _reconcile(now=now or timezone.now(), pull_in=False)


def _stale(record: WalJob, now: datetime) -> bool:
    return _older_than_stale(now)(record)


def _older_than_stale(now: datetime) -> Callable[[WalJob], bool]:
    """``_stale`` with the limit worked out once (a replay asks for every record, twice)."""
    stale_after = settings.LESSONQ_STALE_AFTER
    if stale_after <= 0:
        return lambda record: False
    limit = now - timedelta(seconds=stale_after)
    return lambda record: record.enqueued_at < limit


def _reconcile(*, now: datetime, pull_in: bool) -> Report:
    report = Report()
    active, dead = wal(), dlq()
    due = now if pull_in else None

    # --- files → rows --------------------------------------------------------------------------------
    # In batches (a replay of 100,000 records); a batch that fails is redone one record at a time, and a
    # record that fails on its own is quarantined with its reason, so one poison record never blocks the
    # others (docs/operations.md#poison-records). A database outage stops the pass instead.
    # While the scan goes on, ADOPT_BATCH records at a time: records with no row (every record, on a
    # replay after an outage) are adopted in large COPYs with nothing to lock, and records whose row is
    # this node's and waiting (every record, on a replay after a crash) are settled by one statement; the
    # scan reads the next records in a thread while PostgreSQL takes these. Only the other records take
    # the row-by-row path below, once the whole WAL is read.
    taken: set[str] = set()
    stale = _older_than_stale(now)
    with _BackgroundScan(active, ADOPT_BATCH) as scan:
        for chunk in scan.chunks():
            candidates = [r for r in chunk if is_job_id(r.id) and not stale(r)]
            rows = _settle_waiting([r.id for r in candidates], now, pull_in)  # autocommit: one statement
            fresh = [r for r in candidates if r.id not in rows]
            _isolated(active, fresh, lambda records, part: _adopt(records, due, part), report)
            taken.update(r.id for r in fresh)
            taken.update(job_id for job_id, settled in rows.items() if settled)
        listing = scan.listing()
    dlq_listing = dead.list()
    report.quarantined += len(listing.quarantined) + len(dlq_listing.quarantined)
    # A record whose id is not a JobID cannot become a job row: quarantine it as well.
    for folder, found in ((active, listing), (dead, dlq_listing)):
        for r in [r for r in found.jobs if not is_job_id(r.id)]:
            found.jobs.remove(r)
            if folder.quarantine(folder.path(r.id), "record id is not a JobID"):
                report.quarantined += 1
    dlq_ids = {r.id for r in dlq_listing.jobs}
    wal_ids = {r.id for r in listing.jobs}
    others = [r for r in listing.jobs if r.id not in taken]
    for start in range(0, len(others), BATCH):
        batch = others[start : start + BATCH]
        _isolated(
            active,
            batch,
            lambda records, part: _reconcile_batch(records, dlq_ids, now, pull_in, part),
            report,
        )
    for start in range(0, len(dlq_listing.jobs), BATCH):
        batch = dlq_listing.jobs[start : start + BATCH]
        _isolated(dead, batch, lambda records, part: _reconcile_dlq(records, wal_ids, part), report)

    # --- rows → files ----------------------------------------------------------------------------------
    # Set differences in Python: the id lists can be as long as the WAL (a replay of 100,000 records).
    # Appends never overwrite, so a record written since the listing is left as it is.
    missing_active = _node_ids(ACTIVE) - wal_ids - dlq_ids
    missing_dead = _node_ids((JobState.DEAD,)) - dlq_ids
    for folder, missing, what in ((active, missing_active, "WAL"), (dead, missing_dead, "DLQ")):
        for job in Job.objects.filter(pk__in=missing).select_related("workspace").iterator():
            try:
                written = folder.append(job.wal_job())
            except WalError as exc:  # this row cannot become a record (too large): the others still can
                log.error("lessonq: %s record of job %s cannot be rewritten from its row: %s", what, job.pk, exc)
                continue
            if written:
                log.warning("lessonq: %s record of job %s was missing; rewritten from its row", what, job.pk)
                report.repaired += 1

    # --- dispatch --------------------------------------------------------------------------------------
    report.dispatched += _dispatch_waiting(now=now)
    return report


class _Abandoned(Exception):
    """The pass stopped (a database outage): the scan stops too."""


class _BackgroundScan:
    """``folder.list()`` in a thread of its own, handing its records over in chunks as it reads them, so
    that the caller's database work on one chunk (time spent in PostgreSQL, with the GIL released)
    overlaps the reading of the next. Only the calling thread touches the database. The records wait in
    an unbounded queue: they are all held in the listing anyway."""

    def __init__(self, folder: Wal, chunk: int) -> None:
        self._chunks: queue.SimpleQueue[list[WalJob] | None] = queue.SimpleQueue()
        self._abandoned = threading.Event()
        self._outcome: Listing | BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(folder, chunk), name="lessonq-wal-scan", daemon=True)

    def __enter__(self) -> _BackgroundScan:
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self._abandoned.set()
        self._thread.join()

    def _run(self, folder: Wal, chunk: int) -> None:
        try:
            self._outcome = folder.list(on_chunk=self._hand_over, chunk=chunk)
        except BaseException as exc:  # handed to the caller's thread by listing()
            self._outcome = exc
        finally:
            self._chunks.put(None)

    def _hand_over(self, records: list[WalJob]) -> None:
        if self._abandoned.is_set():
            raise _Abandoned
        self._chunks.put(records)

    def chunks(self) -> Iterator[list[WalJob]]:
        while (records := self._chunks.get()) is not None:
            yield records

    def listing(self) -> Listing:
        """The whole listing, once every chunk has been taken (or the scan's own error)."""
        self._thread.join()
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        assert self._outcome is not None
        return self._outcome


def _isolated(
    folder: Wal, records: list[WalJob], handle: Callable[[list[WalJob], Report], None], report: Report
) -> None:
    """``handle(records)`` in one transaction; if it fails, each record in its own, quarantining the
    ones that fail alone. Counts land in ``report`` only for work that committed."""
    if not records:
        return
    part = Report()
    try:
        with transaction.atomic():
            handle(records, part)
    except _OUTAGE:
        raise
    except Exception as exc:
        if len(records) == 1:
            _quarantine_poison(folder, records[0], exc, report)
            return
        # An adoption COPY of ADOPT_BATCH records is redone in BATCH-sized parts first, so one poison
        # record costs a few hundred single-record transactions, not thousands.
        size = BATCH if len(records) > BATCH else 1
        log.warning("lessonq: a batch of %d records failed (%s); handling them %d at a time", len(records), exc, size)
        for start in range(0, len(records), size):
            _isolated(folder, records[start : start + size], handle, report)
        return
    report.add(part)


def _quarantine_poison(folder: Wal, record: WalJob, exc: Exception, report: Report) -> None:
    reason = f"cannot be handled: {type(exc).__name__}: {exc}"[:2000]
    log.error("lessonq: record %s in %s fails on its own; quarantining it: %s", record.id, folder.dir, reason)
    if folder.quarantine(folder.path(record.id), reason, poison=True):
        report.quarantined += 1


# Records whose row is this node's and waiting (pending or retry_wait) need no repair: on a replay their
# due times are pulled in (chatcli resets future retry times to now), on a sweep they are left alone. One
# statement takes them for a whole batch, locking with SKIP LOCKED as the row-by-row path does; it answers
# with every id that has a row and whether it was settled, so that the same round trip tells a replay
# which records have no row (to adopt); only the other records are loaded and looked at one by one. The
# rows are looked up by id alone, so that the primary key is the only index that fits: right after a
# replay's COPYs the table has no statistics yet, and the planner chose the due-time index and read every
# waiting row. (The last SELECT does not lock: a row another step holds still exists.)
_SETTLE_WAITING = """
WITH locked AS (
  SELECT id, node, state, next_attempt_at > %(now)s OR dispatched_at IS NOT NULL AS to_pull FROM queue_job
  WHERE id = ANY(string_to_array(%(ids)s, ',')) FOR UPDATE SKIP LOCKED
), own AS (
  SELECT id, to_pull FROM locked WHERE node = %(node)s AND state = ANY(%(waiting)s)
), pulled AS (
  UPDATE queue_job AS j SET next_attempt_at = LEAST(j.next_attempt_at, %(now)s), dispatched_at = NULL
  WHERE %(pull_in)s AND j.id = ANY(ARRAY(SELECT id FROM own WHERE to_pull))
)
SELECT j.id, own.id IS NOT NULL FROM queue_job AS j LEFT JOIN own ON own.id = j.id
WHERE j.id = ANY(string_to_array(%(ids)s, ','))
"""


def _settle_waiting(ids: list[str], now: datetime, pull_in: bool) -> dict[str, bool]:
    """Every id of ``ids`` that has a row, and whether its record needs nothing more (see above)."""
    if not ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            _SETTLE_WAITING,
            {
                "ids": _id_list(ids),
                "node": settings.LESSONQ_QUEUE,
                "waiting": [str(s) for s in WAITING],
                "now": now,
                "pull_in": pull_in,
            },
        )
        return dict(cursor.fetchall())


def _reconcile_batch(batch: list[WalJob], dlq_ids: set[str], now: datetime, pull_in: bool, report: Report) -> None:
    # Waiting rows of this node were settled while the scan went on (_SETTLE_WAITING); what reaches here
    # is a stale record, a record whose row is of another kind or node, or one whose row was locked then.
    stale = _older_than_stale(now)
    ids = [r.id for r in batch]
    # The payloads stay in the table: a record's own text is the WAL's, and only the rare repair of a
    # dead row without its DLQ record reads the row's (loaded then).
    rows = Job.objects.select_for_update(skip_locked=True).defer(*PAYLOAD_FIELDS).in_bulk(ids)
    # Ids without a row here either have none or are locked by a concurrent step: only those are asked.
    unseen = [i for i in ids if i not in rows]
    locked = _existing_ids(unseen)
    pulled: list[str] = []
    new_records: list[WalJob] = []
    for record in batch:
        if record.id in locked:
            report.skipped_locked += 1
            continue
        row = rows.get(record.id)
        if row is None and not stale(record):
            new_records.append(record)  # adopted in bulk below (replay of many records): one COPY
            continue
        _reconcile_wal_record(record, row, record.id in dlq_ids, now, pull_in, report, pulled)
    # Adopted rows come in undispatched, due now on a replay (adopt_records pulls their times in).
    report.adopted += adopt_records(new_records, now=now if pull_in else None)
    if pulled:
        # Replay re-dispatches every waiting job now (chatcli resets future retry times to now);
        # one UPDATE, and only of rows it changes.
        Job.objects.filter(pk__in=pulled).filter(Q(next_attempt_at__gt=now) | Q(dispatched_at__isnull=False)).update(
            next_attempt_at=Least(F("next_attempt_at"), Value(now)), dispatched_at=None
        )


def _adopt(records: list[WalJob], due: datetime | None, report: Report) -> None:
    """Records that had no row when listed: rows for them (one that appeared since is left alone)."""
    report.adopted += adopt_records(records, now=due)


def _reconcile_dlq(records: list[WalJob], wal_ids: set[str], report: Report) -> None:
    for record in records:
        with transaction.atomic():
            row = Job.objects.select_for_update(skip_locked=True).filter(pk=record.id).first()
            if row is None and Job.objects.filter(pk=record.id).exists():
                report.skipped_locked += 1
                continue
            if row is None:
                record_from_wal(record, state=JobState.DEAD)
                report.adopted += 1
            elif row.node != settings.LESSONQ_QUEUE:
                # Another node owns the job: it adopted this node's dead jobs (this is the node that came
                # back), or an adoption into this node died before its commit (the next one writes it again).
                dlq().move_to(record.id, expired_dir())
                report.repaired += 1
            elif row.state in DONE or (row.state in WAITING and record.id in wal_ids):
                dlq().ack(record.id)
                report.repaired += 1


def _reconcile_wal_record(
    record: WalJob, row: Job | None, in_dlq: bool, now: datetime, pull_in: bool, report: Report, pulled: list[str]
) -> None:
    if row is not None and row.node != settings.LESSONQ_QUEUE:
        # The same JobID is owned by another node (accepted here while the database was down).
        wal().move_to(record.id, expired_dir())
        report.repaired += 1
        return
    if row is not None and (row.state in DONE or row.state == JobState.DEAD):
        if row.state == JobState.DEAD and not in_dlq:
            dlq().append(row.wal_job())
        wal().ack(record.id)
        report.repaired += 1
        return
    if row is not None and row.state == JobState.RUNNING:
        if not claim_is_stale(row.claimed_by, row.claim_expires_at, now):
            return
        if in_dlq:
            row.mark_dead(row.last_error)
            wal().ack(record.id)
            report.repaired += 1
            return
        # Its worker died: publish it again; the next claim takes it over and counts the lost attempt.
        Job.objects.filter(pk=row.pk).update(dispatched_at=now)
        pk = row.pk
        transaction.on_commit(lambda: publish(pk), robust=True)
        report.dispatched += 1
        return
    # Stale records expire at replay (chatcli's rule: a retried dead job keeps its EnqueuedAt, so an old one
    # may be discarded at the next replay); the periodic sweep leaves a waiting job's record alone, so a job
    # an operator just retried, or one waiting for an LLM, is not expired under them every 30 s.
    if _stale(record, now) and (pull_in or row is None):
        wal().move_to(record.id, expired_dir())
        if row is None:
            row = record_from_wal(record, state=JobState.EXPIRED)
        row.mark_expired()
        metrics.STALE_DISCARDED.inc()
        report.expired += 1
        return
    if row is None:
        record_from_wal(record)
        report.adopted += 1
        if pull_in:
            pulled.append(record.id)
        return
    if pull_in and row.state in WAITING:
        pulled.append(row.pk)


def _node_ids(states: tuple[JobState, ...]) -> set[str]:
    """Ids of this node's rows in ``states``, fetched as plain tuples (100,000 of them after a replay)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM queue_job WHERE node = %s AND state = ANY(%s)",
            [settings.LESSONQ_QUEUE, [str(s) for s in states]],
        )
        return {row[0] for row in cursor.fetchall()}


def _id_list(ids: list[str]) -> str:
    """JobIDs as one comma-separated text parameter, for ``= ANY(string_to_array(%s, ','))``: Django's
    client-side binding quotes a list parameter element by element in Python (0.5 s for a replay's
    100,000 ids), a single text at C speed. A JobID is 16 hex digits: a text with a comma is none, and
    no row has it."""
    return ",".join(i for i in ids if "," not in i)


def _existing_ids(ids: list[str]) -> set[str]:
    if not ids:
        return set()
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM queue_job WHERE id = ANY(string_to_array(%s, ','))", [_id_list(ids)])
        return {row[0] for row in cursor.fetchall()}


ADOPT_ROW_COLUMNS = (
    "id, node, state, task, output, outcome, trigger, agent, attempts, enqueued_at, next_attempt_at, last_error,"
    " waiting_reason, redispatches, claimed_by, created_at, updated_at, workspace_id, agent_token_id"
)


ADOPT_FROM_SCRATCH = (
    f"INSERT INTO queue_job ({ADOPT_ROW_COLUMNS}) SELECT {ADOPT_ROW_COLUMNS} FROM lessonq_adopt"  # noqa: S608 - constants
    " ON CONFLICT (id) DO NOTHING"
)


def adopt_records(records: list[WalJob], *, now: datetime | None = None) -> int:
    """Insert pending rows for WAL records with one COPY (rows that appeared meanwhile are left alone).
    ``now``: pull every due time in to it (replay). Returns how many rows were inserted. They are not
    dispatched: ``_dispatch_waiting`` dispatches the oldest up to capacity, the sweeper the rest as room
    frees, so a large WAL does not flood the broker.

    The caller has checked that none of these rows exist, so the COPY goes straight into ``queue_job``;
    should a producer insert one of them meanwhile, the COPY fails as a whole and the batch goes through
    a scratch table and ``INSERT … ON CONFLICT DO NOTHING`` instead."""
    if not records:
        return 0
    # Times go as ISO 8601 text with their offset, which is what COPY's text format carries anyway:
    # adapting a datetime per column costs more than the rest of the row (4 of them a row, 100,000 rows).
    created = timezone.now().isoformat()
    now_text = now.isoformat() if now is not None else ""
    node, pending = settings.LESSONQ_QUEUE, JobState.PENDING.value
    workspaces, tokens = senders(records)
    rows = []
    for r in records:
        enqueued_text = r.enqueued_at.isoformat()
        due = max(r.next_attempt_at, r.enqueued_at)
        if now is not None and due > now:
            due_text = now_text
        else:  # a new record is due when it was enqueued: the same text
            due_text = enqueued_text if due == r.enqueued_at else due.isoformat()
        rows.append(
            # The row holds what PostgreSQL can store; the record keeps the exact text (docs/api.md#input-policy).
            (r.id, node, pending, storable(r.task), storable(r.attempt), storable(r.outcome), storable(r.trigger),
             storable(r.agent), r.attempts, enqueued_text, due_text, storable(r.last_error), "", 0, "", created,
             created, workspaces.get(r.workspace), r.token_id if r.token_id in tokens else None)
        )  # fmt: skip
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            with cursor.cursor.copy(f"COPY queue_job ({ADOPT_ROW_COLUMNS}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return len(rows)
    except (IntegrityError, psycopg.errors.UniqueViolation):  # psycopg's own: the COPY bypasses Django's wrapper
        pass
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE lessonq_adopt (LIKE queue_job INCLUDING DEFAULTS) ON COMMIT DROP")
        with cursor.cursor.copy(f"COPY lessonq_adopt ({ADOPT_ROW_COLUMNS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(ADOPT_FROM_SCRATCH)
        return cursor.rowcount


def _dispatch_waiting(*, now: datetime) -> int:
    """Re-publish due jobs whose message has evidently been lost (due and dispatched more than
    LESSONQ_REDISPATCH_AFTER ago), then dispatch deferred jobs, oldest first, while there is room."""
    node_rows = Job.objects.for_this_node()
    grace = now - timedelta(seconds=settings.LESSONQ_REDISPATCH_AFTER)
    count = 0
    # Backlog is not loss: a job waiting behind others is re-published at most once per
    # LESSONQ_REDISPATCH_AFTER × 2^redispatches, so a long queue does not fill up with duplicates.
    candidates = (
        node_rows.waiting().filter(dispatched_at__lte=grace, next_attempt_at__lte=grace).order_by("next_attempt_at")
    )
    lost = [
        job
        for job in candidates[: settings.LESSONQ_CAPACITY]
        if job.dispatched_at is not None
        and (now - job.dispatched_at).total_seconds()
        >= settings.LESSONQ_REDISPATCH_AFTER * 2 ** min(job.redispatches, 10)
    ]
    with transaction.atomic():
        count += dispatch_many(lost, now=now, redispatch=True)
    free = room()
    if free <= 0:
        return count
    deferred = list(node_rows.deferred().order_by("enqueued_at")[:free])
    with transaction.atomic():
        count += dispatch_many(deferred, now=now)
    return count


def reclaimable(now: datetime | None = None) -> list[str]:
    now = now or timezone.now()
    return [
        j.pk for j in Job.objects.for_this_node().running() if claim_is_stale(j.claimed_by, j.claim_expires_at, now)
    ]


__all__ = ["ACTIVE", "Report", "known_queues", "reclaimable", "replay", "sweep"]
