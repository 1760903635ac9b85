"""Bulk retry/purge in the background: the operator confirms a preview, the ids are frozen into
``BulkItem`` rows (capped by ``LESSONQ_BULK_CAP``), and a Celery task on the ``default`` queue runs them
through ``lessonq.dlq`` — retries in batches (``retry_many``), purges one by one — recording each item's
result, advancing the progress counters, and stopping between chunks when cancelled. The whole run is
one audit event with its filter and the per-item results (``lessonq.dlq`` audits each retry batch and
each purge as well)."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from lessonboard import locks
from lessonboard.models import AuditEvent
from lessonq import dlq
from lessonq.models import Job
from lessonq.triage.models import BulkAction, BulkItem, BulkKind, BulkState, ItemOutcome
from lessonq.triage.queries import forget_counts

# Items per progress write and cancel check; retries run a chunk as one batch (``dlq.retry_many``:
# grouped WAL fsyncs, one UPDATE), so the chunk also sets how many directory fsyncs a bulk retry pays.
CHUNK = 100
# The advisory-lock class of a bulk action's runner (the object id is the action's): a PostgreSQL session
# lock, so a worker killed mid-run lets it go with its connection.
RUNNER_LOCK = 0x62756C6B  # "bulk"


def start(
    kind: str, job_ids: list[str], *, scope: str, filter: dict[str, Any], matched: int, user: Any = None
) -> BulkAction:
    """Create the bulk action with its frozen, capped item list and queue its run after commit."""
    if kind not in BulkKind.values:
        raise ValueError(f"unknown bulk action {kind!r}")
    cap = settings.LESSONQ_BULK_CAP
    job_ids = job_ids[:cap]
    with transaction.atomic():
        bulk = BulkAction.objects.create(
            kind=kind,
            scope=scope,
            filter=filter,
            matched=matched,
            cap=cap,
            total=len(job_ids),
            created_by=user if getattr(user, "is_authenticated", False) else None,
        )
        BulkItem.objects.bulk_create(
            [BulkItem(bulk=bulk, position=i, job_id=job_id) for i, job_id in enumerate(job_ids)], batch_size=2000
        )
        transaction.on_commit(lambda: run_bulk_action.apply_async(args=[bulk.pk], queue=settings.LESSONQ_BULK_QUEUE))
    return bulk


def run(bulk_id: int) -> str:
    """Run a queued bulk action to the end (or until cancelled). Idempotent: a second delivery while the
    first runs finds the runner's lock taken and returns; one after the end finds it finished; items
    already done are never run twice. A delivery after its runner died (the worker killed mid-run: the
    message comes back, CELERY_TASK_REJECT_ON_WORKER_LOST) finds the lock free and the action still
    running or cancelling, and finishes it from the first item without an outcome."""
    with locks.alone(RUNNER_LOCK, bulk_id) as alone:  # held for the whole run
        if not alone:
            return "running elsewhere"
        now = timezone.now()
        claimed = BulkAction.objects.filter(pk=bulk_id, state=BulkState.QUEUED).update(
            state=BulkState.RUNNING, started_at=now
        )
        orphaned = BulkAction.objects.filter(pk=bulk_id, state__in=(BulkState.RUNNING, BulkState.CANCELLING))
        if not claimed and not orphaned.exists():
            return "not queued"
        return _run_items(bulk_id)


def _run_items(bulk_id: int) -> str:
    bulk = BulkAction.objects.select_related("created_by").get(pk=bulk_id)
    action = dlq.retry if bulk.kind == BulkKind.RETRY else dlq.purge
    reason = f"bulk {bulk.kind} #{bulk.pk}"
    try:
        while True:
            if BulkAction.objects.filter(pk=bulk_id, state=BulkState.CANCELLING).exists():
                break
            items = list(BulkItem.objects.filter(bulk_id=bulk_id, outcome="").order_by("position")[:CHUNK])
            if not items:
                break
            if bulk.kind == BulkKind.RETRY:
                _retry_chunk(items, user=bulk.created_by, reason=reason)
            else:
                for item in items:
                    item.outcome, item.message = _run_one(action, item.job_id, user=bulk.created_by, reason=reason)
            failed = sum(1 for item in items if item.outcome == ItemOutcome.FAILED)
            ok = len(items) - failed
            _save_outcomes(items)
            BulkAction.objects.filter(pk=bulk_id).update(
                processed=F("processed") + len(items), succeeded=F("succeeded") + ok, failed=F("failed") + failed
            )
            forget_counts()
    except Exception as exc:  # record, then let Celery log it: the operator sees "failed" with the reason
        _finish(bulk_id, BulkState.FAILED, error=f"{type(exc).__name__}: {exc}")
        raise
    cancelled = BulkAction.objects.filter(pk=bulk_id, state=BulkState.CANCELLING).exists()
    return _finish(bulk_id, BulkState.CANCELLED if cancelled else BulkState.DONE)


def _save_outcomes(items: list[BulkItem]) -> None:
    """One UPDATE per distinct (outcome, message): a chunk is mostly "done", so one or two statements
    where ``bulk_update`` would build a CASE over every item."""
    groups: dict[tuple[str, str], list[int]] = {}
    for item in items:
        groups.setdefault((item.outcome, item.message), []).append(item.pk)
    for (outcome, message), pks in groups.items():
        BulkItem.objects.filter(pk__in=pks).update(outcome=outcome, message=message)


def _retry_chunk(items: list[BulkItem], *, user: Any, reason: str) -> None:
    """A chunk of retries through ``dlq.retry_many`` (grouped WAL writes, one UPDATE); each item gets
    its outcome. An unexpected error fails the chunk's items, not the run."""
    try:
        result = dlq.retry_many([item.job_id for item in items], user=user, reason=reason)
    except Exception as exc:  # a full disk, a broker hiccup: these items failed, the next chunk may run
        for item in items:
            item.outcome, item.message = ItemOutcome.FAILED, f"{type(exc).__name__}: {exc}"
        return
    done = set(result.done)
    for item in items:
        if item.job_id in result.sent:
            item.outcome, item.message = ItemOutcome.SENT, f"sent to {result.sent[item.job_id]}"
        elif item.job_id in done:
            item.outcome, item.message = ItemOutcome.DONE, ""
        else:
            item.outcome = ItemOutcome.FAILED
            item.message = result.failed.get(item.job_id) or result.failed.get(item.job_id.lower(), "not retried")


def _run_one(action: Any, job_id: str, *, user: Any, reason: str) -> tuple[str, str]:
    try:
        before = Job.objects.filter(pk=job_id).values_list("node", flat=True).first()
        action(job_id, user=user, reason=reason)
    except dlq.DLQError as exc:
        return ItemOutcome.FAILED, str(exc)
    except Exception as exc:  # one bad item (a full disk, a broker hiccup) does not stop the others
        return ItemOutcome.FAILED, f"{type(exc).__name__}: {exc}"
    if before and before != settings.LESSONQ_QUEUE:
        return ItemOutcome.SENT, f"sent to {before}"
    return ItemOutcome.DONE, ""


@transaction.atomic
def _finish(bulk_id: int, state: str, *, error: str = "") -> str:
    """The final state and its audit event in one transaction: whoever sees the action finished finds it
    audited (a page, a test), and a crash between the two cannot leave it finished but unaudited."""
    now = timezone.now()
    BulkItem.objects.filter(bulk_id=bulk_id, outcome="").update(outcome=ItemOutcome.CANCELLED)
    BulkAction.objects.filter(pk=bulk_id).update(state=state, finished_at=now, error=error)
    bulk = BulkAction.objects.select_related("created_by").get(pk=bulk_id)
    items = list(
        BulkItem.objects.filter(bulk_id=bulk_id).order_by("position").values_list("job_id", "outcome", "message")
    )
    AuditEvent.record(
        f"queue.bulk_{bulk.kind}",
        user=bulk.created_by,
        object_type="queue.job",
        object_ids=[job_id for job_id, _, _ in items],
        filter={"scope": bulk.scope, **bulk.filter},
        result={
            "bulk": bulk.pk,
            "state": state,
            "matched": bulk.matched,
            "cap": bulk.cap,
            "succeeded": bulk.succeeded,
            "failed": bulk.failed,
            "cancelled": sum(1 for _, outcome, _ in items if outcome == ItemOutcome.CANCELLED),
            "items": {job_id: (f"{outcome}: {message}" if message else outcome) for job_id, outcome, message in items},
            **({"error": error} if error else {}),
        },
        reason=f"bulk {bulk.kind} #{bulk.pk}",
    )
    forget_counts()
    return state


def cancel(bulk: BulkAction, *, user: Any = None) -> str:
    """Cancel a bulk action (audited); see ``BulkAction.request_cancel``."""
    outcome = bulk.request_cancel()
    if outcome:
        AuditEvent.record(
            "queue.bulk_cancel",
            user=user,
            object_type="queue.bulk",
            object_ids=[bulk.pk],
            result={"outcome": outcome, "processed": bulk.processed, "total": bulk.total},
        )
    if outcome == "cancelled":  # never started: close it here, with its audit row and per-item results
        _finish(bulk.pk, BulkState.CANCELLED)
    return outcome


@shared_task(name="lessonq.bulk.run_bulk_action", ignore_result=True, acks_late=True)
def run_bulk_action(bulk_id: int) -> str:
    return run(bulk_id)
