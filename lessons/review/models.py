"""Memory targets (hermes' MEMORY.md / USER.md as versioned rows), review passes and their proposals.

Registered in the ``lessons`` app through one import at the end of ``lessons/models.py``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.fields.json import KT
from django.db.models.functions import Left
from django.utils import timezone

from lessonboard.models import AgentToken, Workspace

__all__ = [
    "GATE_KEYS",
    "Decision",
    "GateRule",
    "MemoryDocument",
    "MemoryTargetName",
    "MemoryVersion",
    "Proposal",
    "ProposalStatus",
    "ReviewRun",
    "RunStatus",
    "WorkspaceGates",
]


class MemoryTargetName(models.TextChoices):
    MEMORY = "memory", "Agent notes (MEMORY.md)"
    USER = "user", "User profile (USER.md)"


class MemoryDocument(models.Model):
    """One target's live entry list for one workspace; ``version`` counts its changes."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memory_documents")
    target = models.CharField(max_length=10, choices=MemoryTargetName.choices)
    entries = models.JSONField(default=list)
    version = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "lessons"
        ordering = ["workspace", "target"]
        constraints = [models.UniqueConstraint(fields=["workspace", "target"], name="memory_document_unique_target")]

    def __str__(self) -> str:
        return f"{self.workspace} {self.target} v{self.version}"


class MemoryVersion(models.Model):
    """One change to a memory target: the entries after it, who did it and the store's message."""

    document = models.ForeignKey(MemoryDocument, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    action = models.CharField(max_length=20)  # add / replace / remove / undo
    entries = models.JSONField(default=list)
    message = models.TextField(blank=True)
    actor = models.CharField(max_length=200)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "lessons"
        ordering = ["document", "-number"]
        constraints = [models.UniqueConstraint(fields=["document", "number"], name="memory_version_unique_number")]

    def __str__(self) -> str:
        return f"{self.document} v{self.number} {self.action}"


class RunStatus(models.TextChoices):
    OK = "ok", "ok"
    ERROR = "error", "failed"


class ReviewRun(models.Model):
    """One review pass: the summary it was given, the proposer's raw output, and how it ended."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="review_runs")
    agent = models.CharField(max_length=200, blank=True)
    summary = models.TextField()
    prompt_version = models.CharField(max_length=50, blank=True)
    model = models.CharField(max_length=200, blank=True)
    raw_output = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.OK)
    error = models.TextField(blank=True)
    token = models.ForeignKey(AgentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "lessons"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"review run {self.pk} ({self.workspace})"


class ProposalStatus(models.TextChoices):
    PENDING = "pending", "pending"
    APPLIED = "applied", "applied"
    REJECTED = "rejected", "rejected"
    FAILED = "failed", "failed"


class Decision(models.TextChoices):
    NONE = "", "—"
    AUTO = "auto", "gate"
    APPROVED = "approved", "approved"
    EDITED = "edited", "edited and approved"
    REJECTED = "rejected", "rejected"


LIST_PREVIEW_CHARS = 200


class ProposalQuerySet(models.QuerySet["Proposal"]):
    def pending(self) -> ProposalQuerySet:
        return self.filter(status=ProposalStatus.PENDING).order_by("created_at", "id")

    def for_list(self) -> ProposalQuerySet:
        """What the review lists show: the texts cut in SQL (``*_preview``), never the whole proposal."""
        cut = LIST_PREVIEW_CHARS
        return self.defer(
            "content", "old_text", "lesson", "rationale", "original", "gate_reason", "reason", "message"
        ).annotate(
            content_preview=Left("content", cut),
            old_text_preview=Left("old_text", cut),
            situation_preview=Left(KT("lesson__situation"), cut),
            reason_preview=Left("reason", cut),
            message_preview=Left("message", cut),
            gate_reason_preview=Left("gate_reason", cut),
        )

    def decided_by_people(self) -> ProposalQuerySet:
        return self.filter(decision__in=[Decision.APPROVED, Decision.EDITED, Decision.REJECTED])


class Proposal(models.Model):
    """One proposed write and where it ended: one of the pass's four buckets."""

    run = models.ForeignKey(ReviewRun, on_delete=models.CASCADE, related_name="proposals")
    position = models.PositiveIntegerField(default=0)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    agent = models.CharField(max_length=200, blank=True)
    target = models.CharField(max_length=10)
    op = models.CharField(max_length=10)
    content = models.TextField(blank=True)
    old_text = models.TextField(blank=True)
    lesson = models.JSONField(default=dict, blank=True)  # situation / mistake / correction / trigger / tags
    rationale = models.TextField(blank=True)
    score = models.FloatField()  # what the gate read: the reviewing model's or the server's, never the writer's
    agent_score = models.FloatField(
        null=True, blank=True, help_text="The proposing agent's own confidence: advisory, shown, not gated on."
    )
    original = models.JSONField(default=dict, blank=True)  # the proposal as proposed, before any edit
    status = models.CharField(max_length=10, choices=ProposalStatus.choices)
    gate = models.CharField(max_length=10, blank=True)  # auto / human / risk: the policy that decided
    gate_reason = models.TextField(blank=True)
    auto_approve = models.BooleanField(help_text="What the score gate alone would have decided.")
    decision = models.CharField(max_length=10, choices=Decision.choices, blank=True, default="")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True, help_text="A reviewer's reason for rejecting.")
    message = models.TextField(blank=True, help_text="The store's message: success, or why it refused.")
    memory_version = models.ForeignKey(
        MemoryVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    lesson_ref = models.ForeignKey("lessons.Lesson", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    lesson_action = models.CharField(max_length=20, blank=True)
    reserved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reserved_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ProposalQuerySet.as_manager()

    class Meta:
        app_label = "lessons"
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=ProposalStatus.values), name="proposal_status_valid"),
            models.CheckConstraint(condition=Q(score__gte=0.0, score__lte=1.0), name="proposal_score_in_range"),
        ]
        indexes = [models.Index(fields=["status", "created_at"]), models.Index(fields=["target", "-decided_at"])]

    def __str__(self) -> str:
        return f"proposal {self.pk} {self.target}.{self.op} {self.status}"

    @property
    def age(self) -> timedelta:
        return timezone.now() - self.created_at

    def held_by_other(self, user: Any) -> bool:
        return (
            self.reserved_by_id is not None
            and self.reserved_by_id != getattr(user, "pk", None)
            and self.reserved_until is not None
            and self.reserved_until > timezone.now()
        )

    def can_undo(self) -> bool:
        return (
            self.decision in (Decision.APPROVED, Decision.EDITED, Decision.REJECTED)
            and self.decided_at is not None
            and timezone.now() - self.decided_at <= timedelta(seconds=settings.REVIEW_UNDO_GRACE)
        )

    def as_payload(self) -> dict[str, Any]:
        """The proposal in the API's shape (hermes' field names, snake_case)."""
        data: dict[str, Any] = {
            "id": self.pk,
            "target": self.target,
            "op": self.op,
            "rationale": self.rationale,
            "score": self.score,
        }
        if self.agent_score is not None:
            data["agent_score"] = self.agent_score
        if self.op in ("add", "replace") and self.target != "lesson":
            data["content"] = self.content
        if self.op in ("replace", "remove"):
            data["old_text"] = self.old_text
        if self.target == "lesson":
            data["lesson"] = self.lesson
        return data


class GateRule(models.TextChoices):
    """A workspace's rule for one target and op (docs/reviews.md#workspace-rules)."""

    DEFAULT = "", "server default"
    AUTO = "auto", "applies at or above the threshold (below: rejected)"
    HUMAN = "human", "always waits for a person"


# The writes a workspace can set a rule for: its two memory files, each op. Lesson writes always follow the
# server's rule (by default they wait for a person).
GATE_KEYS = tuple(f"{target}.{op}" for target in ("memory", "user") for op in ("add", "replace", "remove"))


class WorkspaceGates(models.Model):
    """One workspace's review-gate rules, set from its gate page; a key it does not set (and every key of a
    workspace without a row) follows the server's ``LESSONBOARD_REVIEW_GATE(S)``."""

    workspace = models.OneToOneField(Workspace, on_delete=models.CASCADE, related_name="review_gates")
    rules = models.JSONField(default=dict, blank=True, help_text='e.g. {"memory.add": "human", "user.add": "auto"}')
    threshold = models.FloatField(
        null=True, blank=True, help_text="The score an auto rule needs; empty: LESSONBOARD_REVIEW_THRESHOLD."
    )
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        app_label = "lessons"
        constraints = [
            models.CheckConstraint(
                condition=Q(threshold__isnull=True) | Q(threshold__gte=0.0, threshold__lte=1.0),
                name="workspace_gates_threshold_in_range",
            )
        ]

    def __str__(self) -> str:
        return f"gates of {self.workspace}"
