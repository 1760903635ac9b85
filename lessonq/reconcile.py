"""Replay (worker start, ``reflect drain``) and the sweeper: bring this node's WAL files and job rows
back to the invariant (ARCHITECTURE.md) and (re)dispatch what is due.

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
- active row, no WAL record (a record lost by hand) → rewrite the record from the row;
- dead row, no DLQ record → rewrite the DLQ record from the row.
Rows a concurrent step holds locked are skipped (``select_for_update(skip_locked=True)``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lessonq import metrics
from lessonq.dispatch import dispatch_many, publish, room
from lessonq.ingest import record_job
from lessonq.jobid import is_job_id
from lessonq.models import ACTIVE, DONE, WAITING, Job, JobState, claim_is_stale
from lessonq.paths import dlq, expired_dir, wal
from lessonq.wal import WalJob

log = logging.getLogger(__name__)
BATCH = 500


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


def known_queues() -> list[str]:
    from lessonboard.models import WorkerHeartbeat

    queues = {settings.LESSONQ_QUEUE}
    queues.update(f"lessonq.{n}" for n in WorkerHeartbeat.objects.values_list("node", flat=True).distinct() if n)
    queues.update(Job.objects.active().values_list("node", flat=True).distinct())
    return sorted(queues)


def replay(*, now: datetime | None = None) -> Report:
    """Boot drain (chatcli §6.6): reconcile, expire stale records, and dispatch every waiting job now
    (future retry times are pulled in, as chatcli does)."""
    return _reconcile(now=now or timezone.now(), pull_in=True)


def sweep(*, now: datetime | None = None) -> Report:
    """Periodic: reconcile, dispatch deferred jobs when room/LLM allow, re-publish due jobs whose
    message was lost, reclaim jobs whose claim died."""
    return _reconcile(now=now or timezone.now(), pull_in=False)


def _stale(record: WalJob, now: datetime) -> bool:
    stale_after = settings.LESSONQ_STALE_AFTER
    return stale_after > 0 and (now - record.enqueued_at).total_seconds() > stale_after


def _reconcile(*, now: datetime, pull_in: bool) -> Report:
    report = Report()
    active, dead = wal(), dlq()
    listing = active.list()
    dlq_listing = dead.list()
    report.quarantined = len(listing.quarantined) + len(dlq_listing.quarantined)
    # A record whose id is not a JobID cannot become a job row: quarantine it as well.
    for folder, found in ((active, listing), (dead, dlq_listing)):
        for r in [r for r in found.jobs if not is_job_id(r.id)]:
            found.jobs.remove(r)
            if folder.quarantine(folder.path(r.id), "record id is not a JobID"):
                report.quarantined += 1
    dlq_ids = {r.id for r in dlq_listing.jobs}
    wal_ids = {r.id for r in listing.jobs}

    # --- files → rows --------------------------------------------------------------------------------
    for start in range(0, len(listing.jobs), BATCH):
        batch = listing.jobs[start : start + BATCH]
        with transaction.atomic():
            ids = [r.id for r in batch]
            rows = Job.objects.select_for_update(skip_locked=True).in_bulk(ids)
            locked = set(Job.objects.filter(pk__in=ids).exclude(pk__in=rows.keys()).values_list("pk", flat=True))
            pulled: list[str] = []
            new_rows: list[Job] = []
            for record in batch:
                if record.id in locked:
                    report.skipped_locked += 1
                    continue
                row = rows.get(record.id)
                if row is None and not _stale(record, now):
                    new_rows.append(_row_for(record))  # adopted in bulk below (replay of many records)
                    continue
                _reconcile_wal_record(record, row, record.id in dlq_ids, now, pull_in, report, pulled)
            if new_rows:
                created = Job.objects.bulk_create(new_rows, ignore_conflicts=True)
                report.adopted += len(created)
                if pull_in:
                    pulled.extend(r.pk for r in new_rows)
            if pulled:
                # Replay re-dispatches every waiting job now (chatcli resets future retry times to now).
                Job.objects.filter(pk__in=pulled, next_attempt_at__gt=now).update(next_attempt_at=now)
                Job.objects.filter(pk__in=pulled).update(dispatched_at=None)
    for record in dlq_listing.jobs:
        with transaction.atomic():
            row = Job.objects.select_for_update(skip_locked=True).filter(pk=record.id).first()
            if row is None and Job.objects.filter(pk=record.id).exists():
                report.skipped_locked += 1
                continue
            if row is None:
                record_job(record, state=JobState.DEAD)
                report.adopted += 1
            elif row.state in DONE or (row.state in WAITING and record.id in wal_ids):
                dead.ack(record.id)
                report.repaired += 1

    # --- rows → files ----------------------------------------------------------------------------------
    node_rows = Job.objects.for_this_node()
    # Set differences in Python: the id lists can be as long as the WAL (a replay of 100,000 records).
    # Appends never overwrite, so a record written since the listing is left as it is.
    missing_active = set(node_rows.active().values_list("pk", flat=True)) - wal_ids - dlq_ids
    missing_dead = set(node_rows.dead().values_list("pk", flat=True)) - dlq_ids
    for job in Job.objects.filter(pk__in=missing_active).iterator():
        if active.append(job.wal_job()):
            log.warning("lessonq: WAL record of active job %s was missing; rewritten from its row", job.pk)
            report.repaired += 1
    for job in Job.objects.filter(pk__in=missing_dead).iterator():
        if dead.append(job.wal_job()):
            log.warning("lessonq: DLQ record of dead job %s was missing; rewritten from its row", job.pk)
            report.repaired += 1

    # --- dispatch --------------------------------------------------------------------------------------
    report.dispatched += _dispatch_waiting(now=now)
    return report


def _reconcile_wal_record(
    record: WalJob, row: Job | None, in_dlq: bool, now: datetime, pull_in: bool, report: Report, pulled: list[str]
) -> None:
    active = wal()
    if row is not None and row.node != settings.LESSONQ_QUEUE:
        # The same JobID is owned by another node (accepted here while the database was down).
        active.move_to(record.id, expired_dir())
        report.repaired += 1
        return
    if row is not None and (row.state in DONE or row.state == JobState.DEAD):
        if row.state == JobState.DEAD and not in_dlq:
            dlq().append(row.wal_job())
        active.ack(record.id)
        report.repaired += 1
        return
    if row is not None and row.state == JobState.RUNNING:
        if not claim_is_stale(row.claimed_by, row.claim_expires_at, now):
            return
        if in_dlq:
            row.mark_dead(row.last_error)
            active.ack(record.id)
            report.repaired += 1
            return
        # Its worker died: publish it again; the next claim takes it over and counts the lost attempt.
        Job.objects.filter(pk=row.pk).update(dispatched_at=now)
        pk = row.pk
        transaction.on_commit(lambda: publish(pk), robust=True)
        report.dispatched += 1
        return
    if _stale(record, now):
        active.move_to(record.id, expired_dir())
        if row is None:
            row = record_job(record, state=JobState.EXPIRED)
        row.mark_expired()
        metrics.STALE_DISCARDED.inc()
        report.expired += 1
        return
    if row is None:
        record_job(record)
        report.adopted += 1
        if pull_in:
            pulled.append(record.id)
        return
    if pull_in and row.state in WAITING:
        pulled.append(row.pk)


def _row_for(record: WalJob) -> Job:
    now = timezone.now()
    return Job(
        id=record.id,
        node=settings.LESSONQ_QUEUE,
        state=JobState.PENDING,
        task=record.task,
        output=record.attempt,
        outcome=record.outcome,
        trigger=record.trigger,
        attempts=record.attempts,
        enqueued_at=record.enqueued_at,
        next_attempt_at=max(record.next_attempt_at, record.enqueued_at),
        last_error=record.last_error,
        created_at=now,
        updated_at=now,
    )


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
