"""Lesson jobs and their attempts. The WAL file is the durable truth of a job's existence; the row is
the queryable state (see the invariant in docs/architecture.md#invariant and ``lessonq.reconcile``)."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import F, Func, Q
from django.db.models.functions import Left
from django.utils import timezone

from lessonboard.inputs import storable
from lessonboard.models import AgentToken, Workspace
from lessonq import fingerprints, gojson, jobid
from lessonq.wal import WalJob


class JobState(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    RETRY_WAIT = "retry_wait", "waiting to retry"
    SUCCEEDED = "succeeded", "succeeded"
    SKIPPED = "skipped", "skipped (nothing actionable)"
    DEAD = "dead", "dead (DLQ)"
    PURGED = "purged", "purged"
    EXPIRED = "expired", "expired (stale)"


WAITING = (JobState.PENDING, JobState.RETRY_WAIT)
ACTIVE = (JobState.PENDING, JobState.RUNNING, JobState.RETRY_WAIT)  # wal/<id>.wal exists
DONE = (JobState.SUCCEEDED, JobState.SKIPPED, JobState.PURGED, JobState.EXPIRED)  # no file


class Trigger(models.TextChoices):
    ERROR = "error", "error"
    HALLUCINATION = "hallucination", "hallucination"
    LOW_QUALITY = "low_quality", "low quality"
    MANUAL = "manual", "manual"


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def claim_expiry(now: datetime, timeout: float) -> datetime:
    """When a claim taken ``now`` runs out. The lease outlives the task's hard time limit (timeout +
    60 s, lessonq/tasks.py): a claim is only taken over by lease expiry once the holder cannot possibly
    still be running."""
    return now + timedelta(seconds=timeout + 90)


def claim_is_stale(claimed_by: str, claim_expires_at: datetime | None, now: datetime) -> bool:
    """A claim is dead when its lease ran out, or when it belongs to a process of this host that is gone
    (a worker child killed with -9): then the job may be taken again, and that counts as an attempt."""
    if claim_expires_at is None or claim_expires_at <= now:
        return True
    host, _, pid = claimed_by.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class OctetLength(Func):
    """PostgreSQL ``octet_length``: the stored size, read without detoasting the value."""

    function = "OCTET_LENGTH"
    output_field = models.BigIntegerField()


# The agent's payload columns: up to MAX_PAYLOAD each (14 MiB jobs exist). Pages never load them whole.
PAYLOAD_FIELDS = ("task", "output", "outcome", "last_error")
LIST_PREVIEW_CHARS = 200  # a list row shows the first ~100 characters of the task and the error
DETAIL_PREVIEW_CHARS = 8192  # the job page shows this much of each payload, with a download link


class JobQuerySet(models.QuerySet["Job"]):
    def for_list(self) -> JobQuerySet:
        """What a list row shows: everything but the payloads, which come as short prefixes cut in SQL
        (``task_preview``, ``error_preview``), so a page of 14 MiB jobs reads a few KiB per row."""
        return self.defer(*PAYLOAD_FIELDS).annotate(
            task_preview=Left("task", LIST_PREVIEW_CHARS), error_preview=Left("last_error", LIST_PREVIEW_CHARS)
        )

    def with_previews(self) -> JobQuerySet:
        """The job page: the payloads as ``<field>_preview`` (DETAIL_PREVIEW_CHARS, cut in SQL) and
        ``<field>_bytes`` (their full size: ``octet_length`` reads the TOAST header, not the value)
        instead of the payloads themselves."""
        annotations: dict[str, Left | OctetLength] = {}
        for name in PAYLOAD_FIELDS:
            annotations[f"{name}_preview"] = Left(name, DETAIL_PREVIEW_CHARS)
            annotations[f"{name}_bytes"] = OctetLength(name)
        return self.defer(*PAYLOAD_FIELDS).annotate(**annotations)

    def for_node(self, node: str) -> JobQuerySet:
        return self.filter(node=node)

    def for_this_node(self) -> JobQuerySet:
        return self.filter(node=settings.LESSONQ_QUEUE)

    def waiting(self) -> JobQuerySet:
        return self.filter(state__in=WAITING)

    def active(self) -> JobQuerySet:
        return self.filter(state__in=ACTIVE)

    def due(self, now: datetime | None = None) -> JobQuerySet:
        return self.waiting().filter(next_attempt_at__lte=now or timezone.now())

    def running(self) -> JobQuerySet:
        return self.filter(state=JobState.RUNNING)

    def dead(self) -> JobQuerySet:
        return self.filter(state=JobState.DEAD)

    def succeeded(self) -> JobQuerySet:
        return self.filter(state=JobState.SUCCEEDED)

    def in_flight(self) -> JobQuerySet:
        """Dispatched and not finished: what capacity bounds."""
        return self.active().filter(dispatched_at__isnull=False)

    def deferred(self) -> JobQuerySet:
        """Accepted into the WAL but not dispatched (no room, or waiting for an LLM)."""
        return self.waiting().filter(dispatched_at__isnull=True)


class Job(models.Model):
    id = models.CharField(primary_key=True, max_length=16, help_text="chatcli JobID (16 hex)")
    node = models.CharField(max_length=200, help_text="Celery queue lessonq.<node> whose WAL holds it")
    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.PENDING)
    task = models.TextField(blank=True)
    output = models.TextField(blank=True, help_text="the agent's attempt (chatcli Request.Attempt)")
    outcome = models.TextField(blank=True)
    trigger = models.CharField(max_length=20, choices=Trigger.choices)
    agent = models.CharField(max_length=200, blank=True)
    # No index on these two: the insert-heavy table pays for every index on each trigger, and nothing
    # looks jobs up by token or workspace alone (deleting one of those rare rows scans instead).
    workspace = models.ForeignKey(
        Workspace, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs", db_index=False
    )
    agent_token = models.ForeignKey(
        AgentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs", db_index=False
    )
    attempts = models.PositiveIntegerField(default=0)
    enqueued_at = models.DateTimeField()
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True)
    waiting_reason = models.CharField(max_length=300, blank=True, help_text="why a pending job is not running")
    dispatched_at = models.DateTimeField(null=True, blank=True, help_text="last publish to the broker")
    redispatches = models.PositiveSmallIntegerField(default=0, help_text="re-publishes since the last dispatch")
    claimed_by = models.CharField(max_length=200, blank=True)
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    lesson = models.ForeignKey(
        "lessons.Lesson", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # DLQ triage: the normalised last error and its group key, kept by PostgreSQL (generated
    # columns, see lessonq/fingerprints.py), so every write path fills them.
    error_signature = models.GeneratedField(
        expression=fingerprints.signature_expression(), output_field=models.TextField(), db_persist=True
    )
    fingerprint = models.GeneratedField(
        expression=fingerprints.fingerprint_expression(), output_field=models.CharField(max_length=16), db_persist=True
    )

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-enqueued_at"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=JobState.values), name="job_state_valid"),
            models.CheckConstraint(condition=Q(id__regex=r"^[0-9a-f]{16}$"), name="job_id_hex16"),
        ]
        # Few indexes on purpose: a new (pending) job enters only the primary key, ``job_due`` and the
        # triage pages' ``queue_job_tab_age`` (state, enqueued_at, id), which also serves what
        # ``job_state_recent`` did. The triage indexes that only dead jobs need are partial
        # (migration 0003_queue_throughput).
        indexes = [
            models.Index(fields=["node", "next_attempt_at"], condition=Q(state__in=WAITING), name="job_due"),
            models.Index(fields=["lesson"], condition=Q(lesson__isnull=False), name="job_lesson"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.state}"

    # --- the WAL record it corresponds to ---------------------------------------------------------------
    def wal_job(self) -> WalJob:
        return WalJob(
            id=self.id,
            task=self.task,
            attempt=self.output,
            outcome=self.outcome,
            trigger=self.trigger,
            enqueued_at=gojson.local(self.enqueued_at),
            next_attempt_at=gojson.local(self.next_attempt_at),
            attempts=self.attempts,
            last_error=self.last_error,
            workspace=self.workspace.slug if self.workspace_id and self.workspace else "",
            agent=self.agent,
            token_id=self.agent_token_id or 0,
        )

    @property
    def chatcli_job_id(self) -> str:
        """chatcli's own JobID of this job's request (the same as ``id`` for a job without a workspace;
        docs/queue.md#dedupe-per-workspace)."""
        return jobid.job_id(task=self.task, attempt=self.output, outcome=self.outcome, trigger=self.trigger)

    # --- transitions --------------------------------------------------------------------------------------
    def _save(self, *fields: str) -> None:
        self.updated_at = timezone.now()
        self.save(update_fields=[*fields, "updated_at"])

    def claim(self, *, timeout: float, now: datetime | None = None) -> bool:
        """Take the job for one attempt, atomically: ``True`` for exactly one caller. A due waiting job
        can be claimed; so can a running one whose claim is stale (that attempt was lost, and counts)."""
        now = now or timezone.now()
        me = worker_identity()
        expires = claim_expiry(now, timeout)
        # Only a job of this node: a node whose jobs were adopted by another (docs/architecture.md#node-failover)
        # refuses them in the very statement that would claim them.
        mine = Job.objects.filter(pk=self.pk, node=settings.LESSONQ_QUEUE)
        updated = mine.filter(state__in=WAITING, next_attempt_at__lte=now).update(
            state=JobState.RUNNING,
            attempts=F("attempts") + 1,
            claimed_by=me,
            claim_expires_at=expires,
            waiting_reason="",
            updated_at=now,
        )
        if not updated:
            current = mine.values("state", "claimed_by", "claim_expires_at").first()
            if current is None or current["state"] != JobState.RUNNING:
                return False
            if not claim_is_stale(current["claimed_by"], current["claim_expires_at"], now):
                return False
            updated = mine.filter(
                state=JobState.RUNNING,
                claimed_by=current["claimed_by"],
                claim_expires_at=current["claim_expires_at"],
            ).update(attempts=F("attempts") + 1, claimed_by=me, claim_expires_at=expires, updated_at=now)
            if not updated:
                return False
            JobAttempt.objects.filter(job_id=self.pk, finished_at__isnull=True).update(
                finished_at=now, outcome=AttemptOutcome.LOST, error="worker lost mid-attempt (killed or timed out)"
            )
        self.refresh_from_db()
        return True

    def mark_succeeded(self, lesson_id: int | None, *, now: datetime | None = None) -> None:
        self.state = JobState.SUCCEEDED
        self.lesson_id = lesson_id
        self.finished_at = now or timezone.now()
        self.claimed_by, self.claim_expires_at = "", None
        self._save("state", "lesson", "finished_at", "claimed_by", "claim_expires_at")

    def mark_skipped(self, *, now: datetime | None = None) -> None:
        self.state = JobState.SKIPPED
        self.finished_at = now or timezone.now()
        self.claimed_by, self.claim_expires_at = "", None
        self._save("state", "finished_at", "claimed_by", "claim_expires_at")

    def mark_retry_wait(self, *, next_attempt_at: datetime, error: str) -> None:
        self.state = JobState.RETRY_WAIT
        self.next_attempt_at = next_attempt_at
        self.last_error = storable(error)
        self.claimed_by, self.claim_expires_at = "", None
        self._save("state", "next_attempt_at", "last_error", "claimed_by", "claim_expires_at")

    def mark_dead(self, error: str, *, now: datetime | None = None) -> None:
        self.state = JobState.DEAD
        if error:
            self.last_error = storable(error)
        self.finished_at = now or timezone.now()
        self.claimed_by, self.claim_expires_at = "", None
        self._save("state", "last_error", "finished_at", "claimed_by", "claim_expires_at")

    def mark_pending_again(self, *, now: datetime | None = None) -> None:
        """Back from the DLQ (docs/compat/chatcli.md#dlq-retry): attempts reset, error cleared, due now; enqueued_at kept."""
        now = now or timezone.now()
        self.state = JobState.PENDING
        self.attempts = 0
        self.last_error = ""
        self.next_attempt_at = now
        self.finished_at = None
        self.dispatched_at = None
        self._save("state", "attempts", "last_error", "next_attempt_at", "finished_at", "dispatched_at")

    def mark_purged(self) -> None:
        self.state = JobState.PURGED
        self.finished_at = timezone.now()
        self._save("state", "finished_at")

    def mark_expired(self) -> None:
        self.state = JobState.EXPIRED
        self.finished_at = timezone.now()
        self.claimed_by, self.claim_expires_at = "", None
        self._save("state", "finished_at", "claimed_by", "claim_expires_at")

    def mark_waiting(self, reason: str) -> None:
        self.waiting_reason = reason
        self.dispatched_at = None
        self._save("waiting_reason", "dispatched_at")


class NodeLoad(models.Model):
    """Jobs dispatched and not finished per node (what ``LESSONQ_CAPACITY`` bounds), kept exact by
    PostgreSQL: statement triggers on ``queue_job`` add the change of every INSERT, UPDATE and DELETE
    (migration 0003_queue_throughput). Reading one row replaces a COUNT on the ingest path, and the row
    lock the trigger takes orders concurrent dispatches, so a dispatch that reads its own increment
    knows whether it fits (``lessonq.dispatch.admit``)."""

    node = models.CharField(primary_key=True, max_length=200)
    in_flight = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.node}: {self.in_flight} in flight"


class Outbox(models.Model):
    """A job an ingest admitted whose message is still to be sent: written by the ingest statement
    (``lessonq.ingest.INSERT_ROW_SQL``) in the row's own transaction, and sent and deleted by the node's
    dispatcher (``lessonq.outbox``), so the web process does no broker work (docs/architecture.md#order-of-effects)."""

    job_id = models.CharField(primary_key=True, max_length=16, help_text="chatcli JobID (16 hex)")
    node = models.CharField(max_length=200, help_text="Celery queue lessonq.<node> the message goes to")
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["node", "created_at"], name="queue_outbox_node_created")]

    def __str__(self) -> str:
        return f"{self.job_id} → {self.node}"


class NodeLease(models.Model):
    """A node's lease on its jobs (docs/architecture.md#node-failover): renewed by the node's lesson worker
    every ``LESSONQ_NODE_LEASE_RENEW`` up to ``LESSONQ_NODE_LEASE`` ahead, in database time. Once it has
    run out, another node adopts the node's active jobs and bumps ``epoch``; a process of the node that
    still holds the old epoch then fails to renew and learns it was adopted from (``lessonq.failover``)."""

    node = models.CharField(primary_key=True, max_length=200, help_text="Celery queue lessonq.<node>")
    epoch = models.PositiveBigIntegerField(default=0, help_text="bumped by every new incarnation and adoption")
    holder = models.CharField(max_length=200, blank=True, help_text="host:pid of the last renewal")
    renewed_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(default=timezone.now)
    adopted_by = models.CharField(max_length=200, blank=True, help_text="the node that last adopted its jobs")
    adopted_at = models.DateTimeField(null=True, blank=True)
    adopted_jobs = models.PositiveBigIntegerField(default=0, help_text="jobs adopted from it, in all")
    # The node's web processes say they are alive here (``lessonq.presence``); a row that only a web ever
    # wrote has epoch 0 (no worker has held the lease yet) and is never adopted from.
    web_seen_at = models.DateTimeField(
        null=True, blank=True, help_text="the last time a web process of the node was alive"
    )
    web_holder = models.CharField(
        max_length=200, blank=True, default="", db_default="", help_text="host:pid of that web process"
    )

    class Meta:
        ordering = ["node"]

    def __str__(self) -> str:
        return f"{self.node} epoch {self.epoch} until {self.expires_at:%Y-%m-%d %H:%M:%S}"


class AttemptOutcome(models.TextChoices):
    SUCCESS = "success", "success"
    SKIPPED = "skipped", "skipped"
    TRANSIENT = "transient", "transient"
    PERMANENT = "permanent", "permanent"
    LOST = "lost", "worker lost"
    CANCELLED = "cancelled", "cancelled by an operator"


class JobAttempt(models.Model):
    """One try of a job: when, how it ended, the error, how long it took."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveIntegerField()
    worker = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=AttemptOutcome.choices, blank=True)
    error = models.TextField(blank=True)
    duration = models.FloatField(null=True, blank=True, help_text="seconds")
    # The model's reply that the lesson parser refused (its first REPLY_CHARS characters), for triage.
    reply = models.TextField(blank=True, default="", db_default="")

    REPLY_CHARS = 4000

    class Meta:
        ordering = ["job", "number"]
        constraints = [models.UniqueConstraint(fields=["job", "number"], name="job_attempt_unique_number")]

    def __str__(self) -> str:
        return f"{self.job_id} #{self.number} {self.outcome or 'running'}"

    def finish(self, outcome: str, error: str = "", *, now: datetime | None = None, reply: str = "") -> None:
        now = now or timezone.now()
        self.finished_at = now
        self.outcome = outcome
        self.error = storable(error)
        self.duration = (now - self.started_at).total_seconds()
        fields = ["finished_at", "outcome", "error", "duration"]
        if reply:
            self.reply = storable(reply[: self.REPLY_CHARS])
            fields.append("reply")
        self.save(update_fields=fields)


from lessonq.triage.models import BulkAction, BulkItem, RetentionRun  # noqa: E402,F401  (DLQ triage)


class NodeAdoption(models.Model):
    """One adoption batch: ``into_node`` took ``jobs`` jobs of ``from_node`` over (``lessonq.failover``).
    The Overview and ``/readyz`` say from these who adopted whose jobs."""

    from_node = models.CharField(max_length=200)
    into_node = models.CharField(max_length=200)
    kind = models.CharField(max_length=20)  # active / dead
    jobs = models.PositiveIntegerField()
    epoch = models.PositiveBigIntegerField(help_text="the adopted node's lease epoch after this batch")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at"]
        indexes = [models.Index(fields=["from_node", "-at"]), models.Index(fields=["into_node", "-at"])]

    def __str__(self) -> str:
        return f"{self.into_node} adopted {self.jobs} {self.kind} job(s) of {self.from_node}"


class LeaderLease(models.Model):
    """The scheduler's leader lease (``lessonq.leader``): beat runs on every node, and only the beat
    process holding this row's live lease sends the periodic tasks. Renewed in database time."""

    name = models.CharField(primary_key=True, max_length=50)
    holder = models.CharField(max_length=200, help_text="node:host:pid of the beat process holding it")
    node = models.CharField(max_length=200)
    epoch = models.PositiveBigIntegerField(default=0, help_text="bumped at every change of holder")
    acquired_at = models.DateTimeField(default=timezone.now)
    renewed_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name}: {self.holder} epoch {self.epoch}"
