"""Accepting triggers: chatcli's trigger detection and outcome text (docs/compat/chatcli.md#triggers) and ``enqueue``,
the in-process entry point (the API view and any other producer call it).

Order of effects (docs/architecture.md#order-of-effects): WAL append (durable) → the row and its outbox entry → answer;
the node's dispatcher publishes (``lessonq.outbox``). Once the WAL append has returned the trigger is
safe: if the database or the broker is down the caller still gets "accepted" and the sweeper/replay
finishes the job.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from lessonboard import breaker, llm
from lessonboard.inputs import storable
from lessonboard.models import AgentToken, Workspace
from lessonq import faults, gojson, metrics
from lessonq.dispatch import QUEUE_FULL, dispatch, wait_for_room
from lessonq.jobid import job_id
from lessonq.models import ACTIVE, DONE, Job, JobState, Trigger
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
    """chatcli's ``LessonRequest`` (docs/compat/chatcli.md#lesson-request)."""

    task: str
    attempt: str
    outcome: str
    trigger: str

    @property
    def job_id(self) -> str:
        """chatcli's JobID (no workspace)."""
        return job_id(task=self.task, attempt=self.attempt, outcome=self.outcome, trigger=self.trigger)

    def job_id_in(self, workspace: str | Workspace | None) -> str:
        """The dedupe key of this request in ``workspace``: chatcli's JobID when there is none, else the
        JobID with the workspace slug as one more input (docs/queue.md#dedupe-per-workspace)."""
        slug = workspace.slug if isinstance(workspace, Workspace) else (workspace or "")
        return job_id(task=self.task, attempt=self.attempt, outcome=self.outcome, trigger=self.trigger, workspace=slug)


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
    status: str  # "accepted" | "deduped" | "reinforced" (a finished job's lesson counted one more occurrence)
    dispatched: bool = False
    recorded: bool = True  # False: the database was unavailable; the WAL holds it, the sweeper adopts it
    lesson_id: int | None = None  # "reinforced": the lesson, and its occurrence count now
    occurrences: int | None = None


def enqueue(
    request: LessonRequest,
    *,
    agent: str = "",
    workspace: str | Workspace | None = None,
    token: AgentToken | None = None,
    now: datetime | None = None,
) -> Enqueued:
    """Accept a lesson request durably on this node. Idempotent per JobID while the job is known.

    The hot path is the WAL append, then one statement that inserts the row, decides its dispatch and
    owes its message to the node's dispatcher (``_insert_row``). A JobID seen before, a full node or an
    LLM outage take the rarer paths below."""
    now = now or timezone.now()
    jid = request.job_id_in(workspace)  # per workspace: the same failure in two workspaces is two jobs
    record = WalJob(
        id=jid,
        task=request.task,
        attempt=request.attempt,
        outcome=request.outcome,
        trigger=request.trigger,
        enqueued_at=gojson.local(now),
        next_attempt_at=gojson.local(now),
        # Who sent it, in the record too: a row adopted from the record alone keeps them.
        workspace=workspace.slug if isinstance(workspace, Workspace) else (workspace or ""),
        agent=agent,
        token_id=token.pk if token is not None and token.pk else 0,
    )
    if not wal().append(record):  # a record exists: the job is active (pending, running, waiting to retry)
        metrics.ENQUEUE.labels(outcome="deduped").inc()
        return Enqueued(jid, "deduped")
    faults.point("ingest.after_wal")
    try:
        ws = Workspace.objects.for_slug(workspace) if isinstance(workspace, str) and workspace else workspace
        ws = ws if isinstance(ws, Workspace) else None
        try:
            verdict = _insert_row(record, agent=agent, workspace=ws, token=token, now=now)
        except IntegrityError:  # the JobID is known: finished, dead, purged or expired
            return _known(record, agent=agent, workspace=ws, token=token, now=now)
        faults.point("ingest.after_row")
        # Admitted: the outbox entry written with the row is the message owed (the node's dispatcher sends it).
        admitted = verdict == ADMITTED or _not_admitted(jid, verdict, now=now)
    except DatabaseError as exc:
        log.warning("lessonq: job %s is in the WAL but not in the database yet (%s); the sweeper adopts it", jid, exc)
        metrics.ENQUEUE.labels(outcome="accepted").inc()
        return Enqueued(jid, "accepted", recorded=False)
    metrics.ENQUEUE.labels(outcome="accepted").inc()
    return Enqueued(jid, "accepted", dispatched=admitted)


# What ``_insert_row`` decided for the new row.
ADMITTED = "admitted"  # dispatched: counted in flight, its message to be published
FULL = "full"  # no room on this node: deferred in the WAL (waiting_reason says so)
OUTAGE = "outage"  # the LLM breaker is open: deferred until it closes
UNCONFIGURED = "unconfigured"  # no LLM configured: deferred

# One round trip, one implicit transaction (both statements go in one simple-query message):
# - the commit need not wait for PostgreSQL's own WAL flush (synchronous_commit off for this
#   transaction only): the trigger is already durable in our WAL file, fsynced before the answer, and
#   a row lost to a crash is adopted again by replay (records without rows,
#   docs/architecture.md#invariant). The row is a projection of the record here, not worth a second fsync;
# - the row is inserted already decided: dispatched when the LLM is usable (configured, breaker closed)
#   and the node has room. ``FOR UPDATE`` on the node's ``NodeLoad`` row orders concurrent ingests, and
#   the statement trigger adds this row to that count before the commit releases the lock, so the next
#   ingest reads it: admission is exact without a COUNT and without a second round trip. (A node's
#   first ingest creates that row, so even the first concurrent ingests have a row to lock.)
# - an admitted job's message is owed in ``queue_outbox``, written in the same transaction: the node's
#   dispatcher (``lessonq.outbox``, a thread of its lesson worker) sends it, so the web process does no
#   broker work (a publish costs as much CPU as the WAL append, and competes for the GIL with requests).
INSERT_ROW_SQL = """
SELECT set_config('synchronous_commit', 'off', true);
INSERT INTO queue_nodeload (node, in_flight) VALUES (%(node)s, 0) ON CONFLICT (node) DO NOTHING;
WITH verdict AS (
  SELECT CASE
    WHEN NOT %(configured)s THEN 'unconfigured'
    WHEN EXISTS (
      SELECT 1 FROM lessonboard_llmbreaker WHERE endpoint = %(endpoint)s AND state IN ('open', 'half_open')
    ) THEN 'outage'
    WHEN COALESCE((SELECT in_flight FROM queue_nodeload WHERE node = %(node)s FOR UPDATE), 0) < %(capacity)s
      THEN 'admitted'
    ELSE 'full'
  END AS v
), job AS (
  INSERT INTO queue_job (
    id, node, state, task, output, outcome, trigger, agent, workspace_id, agent_token_id, attempts,
    enqueued_at, next_attempt_at, last_error, waiting_reason, dispatched_at, redispatches, claimed_by,
    created_at, updated_at
  )
  SELECT %(id)s, %(node)s, 'pending', %(task)s, %(output)s, %(outcome)s, %(trigger)s, %(agent)s,
    %(workspace)s, %(token)s, 0, %(now)s, %(now)s, '',
    CASE v WHEN 'full' THEN %(full)s WHEN 'unconfigured' THEN %(unconfigured)s ELSE '' END,
    CASE v WHEN 'admitted' THEN %(now)s::timestamptz END, 0, '', %(now)s, %(now)s
  FROM verdict
  RETURNING id
), outbox AS (
  INSERT INTO queue_outbox (job_id, node, created_at)
  SELECT id, %(node)s, %(now)s FROM job, verdict WHERE v = 'admitted'
  ON CONFLICT (job_id) DO NOTHING
)
SELECT v FROM verdict, job
"""


def _insert_row(
    record: WalJob, *, agent: str, workspace: Workspace | None, token: AgentToken | None, now: datetime
) -> str:
    """Insert the new pending row and decide its dispatch in one statement: the verdict (``ADMITTED``…).
    ``IntegrityError`` when the JobID has a row already (nothing is written then)."""
    params = {
        "id": record.id,
        "node": settings.LESSONQ_QUEUE,
        # The row holds what PostgreSQL can store; the WAL record keeps the exact text (docs/api.md#input-policy).
        "task": storable(record.task),
        "output": storable(record.attempt),
        "outcome": storable(record.outcome),
        "trigger": storable(record.trigger),
        "agent": storable(agent),
        "workspace": workspace.pk if workspace is not None else None,
        "token": token.pk if token is not None and token.pk is not None else None,
        "now": now,
        "configured": llm.is_configured(),
        "endpoint": breaker.endpoint(),
        "capacity": settings.LESSONQ_CAPACITY,
        "full": QUEUE_FULL.format(capacity=settings.LESSONQ_CAPACITY)[:300],
        "unconfigured": llm.status_text()[:300],
    }
    connection = transaction.get_connection()
    # Inside a caller's transaction a duplicate key must not abort it: a savepoint around the statement.
    with transaction.atomic() if connection.in_atomic_block else nullcontext(), connection.cursor() as cursor:
        cursor.execute(INSERT_ROW_SQL, params)
        cursor.nextset()  # past set_config's row and the NodeLoad insert to the RETURNING row
        cursor.nextset()
        row = cursor.fetchone()
    return str(row[0]) if row else FULL


def _not_admitted(jid: str, verdict: str, *, now: datetime) -> bool:
    """The rarer paths of a new row that was not dispatched: an outage gets its reason (the breaker's
    text); a full node makes room by DropOldest, or waits up to LESSONQ_BLOCK_TIMEOUT (Block policy)."""
    if verdict == OUTAGE:
        reason = llm.unavailable_reason()[:300]
        Job.objects.filter(pk=jid, dispatched_at__isnull=True).update(waiting_reason=reason)
        return False
    if verdict != FULL:
        return False
    job = Job.objects.get(pk=jid)
    if settings.LESSONQ_DROP_OLDEST and dispatch(job, now=now):  # admit() un-dispatches the oldest waiting job
        return True
    return wait_for_room(job, now=now)


def _known(
    record: WalJob, *, agent: str, workspace: str | Workspace | None, token: AgentToken | None, now: datetime
) -> Enqueued:
    """The WAL append succeeded but the row exists. Under the row lock (a DLQ retry takes it too): a
    purged or expired job runs anew; an active one keeps the record (rewritten from the row); a
    finished or dead one is a duplicate, so the record just written goes again (a crash before that
    unlink is repaired by replay: WAL record + finished row → unlink)."""
    with transaction.atomic():
        row = Job.objects.select_for_update().filter(pk=record.id).values_list("state", "lesson_id").first()
        state, lesson_id = row if row is not None else (None, None)
        again = False
        if state in (JobState.SUCCEEDED, JobState.SKIPPED):
            # A repeated failure (docs/queue.md#repeated-failures): its lesson counts one more occurrence,
            # or, when there is no lesson in use any more (archived by a person, deleted, none made), the
            # job runs again to learn anew.
            lesson = _lesson_in_use(lesson_id)
            if lesson is not None:
                _count_occurrence(lesson, record.id, now=now)
                wal().ack(record.id)
                metrics.ENQUEUE.labels(outcome="deduped").inc()
                return Enqueued(record.id, "reinforced", lesson_id=lesson.pk, occurrences=lesson.occurrences)
            again = True
        if again or state in (JobState.PURGED, JobState.EXPIRED):
            if again:
                _release_source(record.id)
            job = record_job(record, agent=agent, workspace=workspace, token=token, again=again)
            dispatched = dispatch(job, now=now)
            metrics.ENQUEUE.labels(outcome="accepted").inc()
            return Enqueued(record.id, "accepted", dispatched=dispatched)
        if state in ACTIVE:
            job = Job.objects.get(pk=record.id)
            if job.node == settings.LESSONQ_QUEUE:
                # Our append found no record, so the row was adopted from it a moment ago (a replay running
                # concurrently) or its record was lost; either way the row's state is the record's truth.
                wal().update(job.wal_job())
                metrics.ENQUEUE.labels(outcome="accepted").inc()
                return Enqueued(record.id, "accepted", dispatched=dispatch(job, now=now))
            # Active on another node (the balancer sent the repeat here): that node's record and queue run
            # it, so this one is a duplicate, as a repeat on the same node is.
        if state is not None:
            wal().ack(record.id)
    metrics.ENQUEUE.labels(outcome="deduped").inc()
    return Enqueued(record.id, "deduped")


def _lesson_in_use(lesson_id: int | None) -> Any:
    """The active lesson a finished job's lesson is now (following supersedes), or ``None``."""
    from lessons.models import Lesson, LessonStatus

    seen: set[int] = set()
    while lesson_id is not None and lesson_id not in seen:
        seen.add(lesson_id)
        lesson = Lesson.objects.select_for_update().filter(pk=lesson_id).first()
        if lesson is None:
            return None
        if lesson.status == LessonStatus.ACTIVE:
            return lesson
        if lesson.status != LessonStatus.SUPERSEDED:
            return None  # archived: a person took it out of use, so the failure is learnt again
        lesson_id = lesson.superseded_by_id
    return None


def _count_occurrence(lesson: Any, jid: str, *, now: datetime) -> None:
    from lessons.models import VersionAction
    from lessons.store import record_version

    lesson.occurrences += 1
    lesson.last_seen = now
    lesson.save(update_fields=["occurrences", "last_seen"])
    record_version(
        lesson,
        VersionAction.REINFORCE,
        actor=f"job:{jid}",
        reason=f"the same failure was reported again (occurrence {lesson.occurrences})",
    )


def _release_source(jid: str) -> None:
    """A job that runs again produces a lesson of its own: the lesson it made before, out of use,
    gives up its ``source_job_id`` (its versions keep the job's id)."""
    from lessons.models import Lesson, LessonStatus

    Lesson.objects.filter(source_job_id=jid).exclude(status=LessonStatus.ACTIVE).update(source_job_id=None)


def _row_fields(
    record: WalJob, *, agent: str, workspace: Workspace | None, token: AgentToken | None, state: str = JobState.PENDING
) -> dict[str, Any]:
    return dict(
        node=settings.LESSONQ_QUEUE,
        state=state,
        # The row holds what PostgreSQL can store; the WAL record keeps the exact text (docs/api.md#input-policy).
        task=storable(record.task),
        output=storable(record.attempt),
        outcome=storable(record.outcome),
        trigger=storable(record.trigger),
        agent=storable(agent),
        workspace=workspace,
        agent_token=token,
        attempts=record.attempts,
        enqueued_at=record.enqueued_at,
        next_attempt_at=max(record.next_attempt_at, record.enqueued_at),
        last_error=storable(record.last_error),
        dispatched_at=None,
        finished_at=None,
        lesson=None,
        claimed_by="",
        claim_expires_at=None,
    )


def record_job(
    record: WalJob,
    *,
    agent: str = "",
    workspace: str | Workspace | None = None,
    token: AgentToken | None = None,
    state: str = JobState.PENDING,
    again: bool = False,
) -> Job:
    """Insert the row for a WAL record (or reset a purged/expired one for a new run; with ``again``, a
    finished one too: a repeated failure whose lesson is out of use)."""
    ws = Workspace.objects.for_slug(workspace) if isinstance(workspace, str) and workspace else workspace
    fields = _row_fields(
        record, agent=agent, workspace=ws if isinstance(ws, Workspace) else None, token=token, state=state
    )
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=record.id).first()
        if job is None:
            try:
                with transaction.atomic():
                    return Job.objects.create(id=record.id, **fields)
            except IntegrityError:  # another process adopted it first
                return Job.objects.select_for_update().get(pk=record.id)
        if job.state in (JobState.PURGED, JobState.EXPIRED) or (again and job.state in DONE):
            for name, value in fields.items():
                setattr(job, name, value)
            job.updated_at = timezone.now()
            job.save()
        return job


def senders(records: list[WalJob]) -> tuple[dict[str, int], set[int]]:
    """The workspaces the records name (slug → id; one the database does not know yet is created, as the
    ingest would have) and which of their tokens still exist (a deleted one leaves the row without)."""
    slugs = sorted({r.workspace for r in records if r.workspace})
    workspaces = dict(Workspace.objects.filter(slug__in=slugs).values_list("slug", "id"))
    for slug in slugs:
        if slug not in workspaces:
            workspaces[slug] = Workspace.objects.for_slug(slug).pk
    wanted = {r.token_id for r in records if r.token_id}
    tokens = set(AgentToken.objects.filter(pk__in=wanted).values_list("pk", flat=True)) if wanted else set()
    return workspaces, tokens


def record_from_wal(record: WalJob, *, state: str = JobState.PENDING) -> Job:
    """``record_job`` for a record adopted alone (no request beside it): with the workspace, agent and token
    the record names (``WalJob.workspace``; chatcli's records name none)."""
    token = AgentToken.objects.filter(pk=record.token_id).first() if record.token_id else None
    return record_job(record, agent=record.agent, workspace=record.workspace or None, token=token, state=state)
