"""Accepting triggers: chatcli's trigger detection and outcome text (spec §10.2–10.3) and ``enqueue``,
the in-process entry point (the API view and any other producer call it).

Order of effects (ARCHITECTURE.md): WAL append (durable) → answer → upsert the row → publish after
commit. Once the WAL append has returned the trigger is safe: if the database or the broker is down
the caller still gets "accepted" and the sweeper/replay finishes the job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from lessonboard.models import AgentToken, Workspace
from lessonq import faults, gojson, metrics
from lessonq.dispatch import dispatch
from lessonq.jobid import job_id
from lessonq.models import DONE, Job, JobState, Trigger
from lessonq.paths import wal
from lessonq.wal import WalJob

log = logging.getLogger(__name__)

META_FORCE = "force_reflexion"
META_DISCREPANCY = "verified_with_discrepancy"
META_DISCREPANCIES = "verifier_discrepancies"
META_LOW_QUALITY = "refine_low_quality"
META_LOW_QUALITY_REASON = "refine_low_quality_reason"


@dataclass(frozen=True)
class LessonRequest:
    """chatcli's ``LessonRequest`` (§2.1)."""

    task: str
    attempt: str
    outcome: str
    trigger: str

    @property
    def job_id(self) -> str:
        return job_id(task=self.task, attempt=self.attempt, outcome=self.outcome, trigger=self.trigger)


@dataclass(frozen=True)
class AgentResult:
    """What an agent reports: its task, output, error and metadata flags."""

    task: str
    output: str = ""
    error: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


def _flag(metadata: dict[str, str], key: str) -> bool:
    return metadata.get(key) == "true"  # chatcli: exactly the string "true"


def detect(result: AgentResult) -> LessonRequest | None:
    """The lesson request for ``result``, or ``None`` when no trigger fires (first match wins)."""
    md = result.metadata
    if _flag(md, META_FORCE):
        trigger = Trigger.MANUAL
    elif settings.LESSONQ_ON_ERROR and result.error:
        trigger = Trigger.ERROR
    elif settings.LESSONQ_ON_HALLUCINATION and _flag(md, META_DISCREPANCY):
        trigger = Trigger.HALLUCINATION
    elif settings.LESSONQ_ON_LOW_QUALITY and _flag(md, META_LOW_QUALITY):
        trigger = Trigger.LOW_QUALITY
    else:
        return None
    return LessonRequest(task=result.task, attempt=result.output, outcome=outcome_text(result), trigger=trigger.value)


def outcome_text(result: AgentResult) -> str:
    md = result.metadata
    if result.error:
        return f"ERROR: {result.error}"
    if _flag(md, META_DISCREPANCY):
        return f"DISCREPANCY (from CoVe): {md.get(META_DISCREPANCIES, '')}"
    if _flag(md, META_LOW_QUALITY):
        return f"LOW QUALITY (from Self-Refine): {md.get(META_LOW_QUALITY_REASON, '')}"
    return "MANUAL: user requested /reflect"


@dataclass(frozen=True)
class Enqueued:
    job_id: str
    status: str  # "accepted" | "deduped"
    dispatched: bool = False
    recorded: bool = True  # False: the database was unavailable; the WAL holds it, the sweeper adopts it


def enqueue(
    request: LessonRequest,
    *,
    agent: str = "",
    workspace: str | Workspace | None = None,
    token: AgentToken | None = None,
    now: datetime | None = None,
) -> Enqueued:
    """Accept a lesson request durably on this node. Idempotent per JobID while the job is known."""
    now = now or timezone.now()
    jid = request.job_id
    try:
        with transaction.atomic():  # a savepoint: a failing database must not poison the caller's transaction
            existing = Job.objects.filter(pk=jid).values_list("state", flat=True).first()
    except DatabaseError:
        existing = None
    if existing is not None and existing not in (JobState.PURGED, JobState.EXPIRED):
        # Known and either in flight, done or in the DLQ (retry it from there): one job per JobID.
        metrics.ENQUEUE.labels(outcome="deduped").inc()
        return Enqueued(jid, "deduped")
    record = WalJob(
        id=jid,
        task=request.task,
        attempt=request.attempt,
        outcome=request.outcome,
        trigger=request.trigger,
        enqueued_at=gojson.local(now),
        next_attempt_at=gojson.local(now),
    )
    if not wal().append(record):
        metrics.ENQUEUE.labels(outcome="deduped").inc()
        return Enqueued(jid, "deduped")
    faults.point("ingest.after_wal")
    metrics.ENQUEUE.labels(outcome="accepted").inc()
    try:
        job = record_job(record, agent=agent, workspace=workspace, token=token)
        faults.point("ingest.after_row")
        dispatched = dispatch(job, now=now, block=True)
    except DatabaseError as exc:
        log.warning("lessonq: job %s is in the WAL but not in the database yet (%s); the sweeper adopts it", jid, exc)
        return Enqueued(jid, "accepted", recorded=False)
    return Enqueued(jid, "accepted", dispatched=dispatched)


def record_job(
    record: WalJob,
    *,
    agent: str = "",
    workspace: str | Workspace | None = None,
    token: AgentToken | None = None,
    state: str = JobState.PENDING,
) -> Job:
    """Insert the row for a WAL record (or reset a purged/expired one for a new run)."""
    ws = Workspace.objects.for_slug(workspace) if isinstance(workspace, str) and workspace else workspace
    fields: dict[str, Any] = dict(
        node=settings.LESSONQ_QUEUE,
        state=state,
        task=record.task,
        output=record.attempt,
        outcome=record.outcome,
        trigger=record.trigger,
        agent=agent,
        workspace=ws if isinstance(ws, Workspace) else None,
        agent_token=token,
        attempts=record.attempts,
        enqueued_at=record.enqueued_at,
        next_attempt_at=max(record.next_attempt_at, record.enqueued_at),
        last_error=record.last_error,
        dispatched_at=None,
        finished_at=None,
        lesson=None,
        claimed_by="",
        claim_expires_at=None,
    )
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=record.id).first()
        if job is None:
            try:
                with transaction.atomic():
                    return Job.objects.create(id=record.id, **fields)
            except IntegrityError:  # another process adopted it first
                return Job.objects.select_for_update().get(pk=record.id)
        if job.state in DONE and job.state in (JobState.PURGED, JobState.EXPIRED):
            for name, value in fields.items():
                setattr(job, name, value)
            job.updated_at = timezone.now()
            job.save()
        return job
