"""DLQ triage rows: bulk actions (a frozen list of jobs, progress, cancel, a result per item) and
retention runs (what was archived, where the export is)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class BulkKind(models.TextChoices):
    RETRY = "retry", "retry"
    PURGE = "purge", "purge"


class BulkState(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    CANCELLING = "cancelling", "cancelling"
    CANCELLED = "cancelled", "cancelled"
    DONE = "done", "done"
    FAILED = "failed", "failed"


BULK_FINISHED = (BulkState.CANCELLED, BulkState.DONE, BulkState.FAILED)


class BulkActionQuerySet(models.QuerySet["BulkAction"]):
    def unfinished(self) -> BulkActionQuerySet:
        return self.exclude(state__in=BULK_FINISHED)


class BulkAction(models.Model):
    """A retry or purge over a selection or a filter, run in the background by ``lessonq.bulk``.

    The job ids are frozen into ``BulkItem`` rows when the operator confirms, so what runs is exactly
    what the preview counted (capped), whatever matches the filter later."""

    kind = models.CharField(max_length=10, choices=BulkKind.choices)
    state = models.CharField(max_length=12, choices=BulkState.choices, default=BulkState.QUEUED)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    scope = models.CharField(max_length=10, help_text="selection or filter")
    filter = models.JSONField(default=dict, blank=True, help_text="the page filter it was started from")
    matched = models.PositiveIntegerField(default=0, help_text="jobs matching when confirmed (before the cap)")
    cap = models.PositiveIntegerField()
    total = models.PositiveIntegerField(default=0)
    processed = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = BulkActionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.CheckConstraint(condition=Q(state__in=BulkState.values), name="bulk_state_valid")]

    def __str__(self) -> str:
        return f"bulk {self.kind} #{self.pk} {self.state}"

    @property
    def is_finished(self) -> bool:
        return self.state in BULK_FINISHED

    @property
    def percent(self) -> int:
        return 100 if not self.total else int(100 * self.processed / self.total)

    def request_cancel(self) -> str:
        """Stop it: a queued one is cancelled at once (``"cancelled"``), a running one stops after the
        current item (``"cancelling"``); ``""`` when it has already finished."""
        if BulkAction.objects.filter(pk=self.pk, state=BulkState.QUEUED).update(state=BulkState.CANCELLED):
            outcome = "cancelled"
        elif BulkAction.objects.filter(pk=self.pk, state=BulkState.RUNNING).update(state=BulkState.CANCELLING):
            outcome = "cancelling"
        else:
            outcome = ""
        self.refresh_from_db()
        return outcome


class ItemOutcome(models.TextChoices):
    DONE = "done", "done"
    SENT = "sent", "sent to its node"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled (not run)"


class BulkItem(models.Model):
    bulk = models.ForeignKey(BulkAction, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    job_id = models.CharField(max_length=16)
    outcome = models.CharField(max_length=10, choices=ItemOutcome.choices, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["bulk", "position"]
        constraints = [models.UniqueConstraint(fields=["bulk", "position"], name="bulk_item_position")]

    def __str__(self) -> str:
        return f"{self.job_id} {self.outcome or 'waiting'}"


class RetentionRun(models.Model):
    """One pass of the DLQ retention: dead jobs over the cap or the age limit, archived (exported and
    moved out of the DLQ, never deleted)."""

    node = models.CharField(max_length=200)
    ran_at = models.DateTimeField(default=timezone.now)
    over_cap = models.PositiveIntegerField(default=0)
    over_age = models.PositiveIntegerField(default=0)
    archived = models.PositiveIntegerField(default=0)
    export_path = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-ran_at", "-id"]

    def __str__(self) -> str:
        return f"retention {self.node} {self.ran_at:%Y-%m-%d %H:%M} archived {self.archived}"
