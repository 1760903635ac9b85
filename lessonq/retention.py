"""DLQ retention: dead jobs beyond ``LESSONQ_DLQ_MAX`` (oldest deaths first) or older than
``LESSONQ_DLQ_MAX_AGE`` are archived — never silently deleted (unlike Sidekiq, whose trimmed jobs are
gone, and whose cap once fell back to 10k on upgrade and lost jobs: the cap here is one setting, shown
on the page and as a gauge).

Archiving a job, in this order (a crash between steps leaves the job findable):
1. its row and attempts appended as one JSON line to ``<base>/archive/<run>/jobs.jsonl`` (fsynced);
2. its DLQ record moved (rename, not copy-and-delete) into the same folder;
3. the row marked ``purged``; one ``RetentionRun`` row and one audit event per run count it.
Runs per node (the DLQ records are node-local): beat fans ``enforce`` out to every node's queue.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from lessonboard.files import fsync_dir
from lessonboard.models import AuditEvent
from lessonq.models import Job, JobState
from lessonq.paths import base, dlq
from lessonq.triage.models import RetentionRun


def distance_to_cap() -> tuple[int, int]:
    """``(dead jobs on this node, LESSONQ_DLQ_MAX)``."""
    return Job.objects.dead().for_this_node().count(), settings.LESSONQ_DLQ_MAX


def _export_line(job: Job, reason: str) -> str:
    row = {
        "id": job.id,
        "node": job.node,
        "state": job.state,
        "reason": reason,
        "task": job.task,
        "output": job.output,
        "outcome": job.outcome,
        "trigger": job.trigger,
        "agent": job.agent,
        "workspace": job.workspace.slug if job.workspace_id and job.workspace else "",
        "attempts": job.attempts,
        "enqueued_at": job.enqueued_at.isoformat(),
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "last_error": job.last_error,
        "fingerprint": job.fingerprint,
        "attempt_rows": [
            {
                "number": a.number,
                "started_at": a.started_at.isoformat(),
                "finished_at": a.finished_at.isoformat() if a.finished_at else None,
                "outcome": a.outcome,
                "error": a.error,
                "duration": a.duration,
            }
            for a in job.attempt_rows.all()
        ],
    }
    return json.dumps(row, ensure_ascii=False)


def enforce(*, now: datetime | None = None, batch: int = 1000) -> RetentionRun | None:
    """Archive this node's dead jobs over the age limit or the cap; ``None`` when nothing is over."""
    now = now or timezone.now()
    dead = Job.objects.dead().for_this_node()
    reasons: dict[str, str] = {}
    if settings.LESSONQ_DLQ_MAX_AGE:
        cutoff = now - timedelta(seconds=settings.LESSONQ_DLQ_MAX_AGE)
        aged = dead.filter(Q(finished_at__lt=cutoff) | Q(finished_at__isnull=True, enqueued_at__lt=cutoff))
        reasons.update(dict.fromkeys(aged.values_list("pk", flat=True), "age"))
    over = dead.exclude(pk__in=list(reasons)).count() - settings.LESSONQ_DLQ_MAX
    if over > 0:
        oldest = dead.exclude(pk__in=list(reasons)).order_by("finished_at", "enqueued_at", "id")
        reasons.update(dict.fromkeys(oldest.values_list("pk", flat=True)[:over], "cap"))
    if not reasons:
        return None
    folder = base() / "archive" / now.strftime("%Y%m%dT%H%M%S%f")
    folder.mkdir(mode=0o750, parents=True, exist_ok=True)
    export = folder / "jobs.jsonl"
    ids = list(reasons)
    archived: list[str] = []
    with export.open("a", encoding="utf-8") as out:
        for start in range(0, len(ids), batch):
            jobs = Job.objects.filter(pk__in=ids[start : start + batch], state=JobState.DEAD)
            jobs = jobs.select_related("workspace").prefetch_related("attempt_rows")
            chunk = list(jobs)
            out.writelines(_export_line(job, reasons[job.id]) + "\n" for job in chunk)
            out.flush()
            os.fsync(out.fileno())
            for job in chunk:
                dlq().move_to(job.id, folder)
                with transaction.atomic():
                    locked = Job.objects.select_for_update().filter(pk=job.id, state=JobState.DEAD).first()
                    if locked is not None:
                        locked.mark_purged()
                        archived.append(job.id)
    fsync_dir(folder)
    run = RetentionRun.objects.create(
        node=settings.LESSONQ_QUEUE,
        ran_at=now,
        over_age=sum(1 for r in reasons.values() if r == "age"),
        over_cap=sum(1 for r in reasons.values() if r == "cap"),
        archived=len(archived),
        export_path=str(export),
    )
    AuditEvent.record(
        "queue.dlq_archive",
        object_type="queue.job",
        object_ids=archived,
        filter={"max": settings.LESSONQ_DLQ_MAX, "max_age_seconds": settings.LESSONQ_DLQ_MAX_AGE},
        result={"archived": len(archived), "over_cap": run.over_cap, "over_age": run.over_age, "export": str(export)},
        reason="retention",
    )
    from lessonq.triage.queries import forget_counts

    forget_counts()
    return run


@shared_task(name="lessonq.retention.enforce", ignore_result=True)
def enforce_task() -> dict[str, Any]:
    run = enforce()
    return {"archived": run.archived if run else 0}


@shared_task(name="lessonq.retention.enforce_all", ignore_result=True)
def enforce_all() -> list[str]:
    """Beat entry: run the retention on every known node's queue (next to its DLQ records)."""
    from lessonq.reconcile import known_queues

    queues = known_queues()
    for queue in queues:
        enforce_task.apply_async(queue=queue)
    return queues
