"""Refine runs and their passes, and each agent's refine mode (chatcli's ``/refine on|off|once|auto``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from lessonboard.models import AgentToken, Workspace


class RunStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    DONE = "done", "done"
    SKIPPED = "skipped", "skipped"
    FAILED = "failed", "failed"


FINISHED = (RunStatus.DONE, RunStatus.SKIPPED, RunStatus.FAILED)


class RefineRunQuerySet(models.QuerySet["RefineRun"]):
    def finished(self) -> RefineRunQuerySet:
        return self.filter(status__in=FINISHED)

    def in_flight(self) -> RefineRunQuerySet:
        return self.filter(status__in=(RunStatus.QUEUED, RunStatus.RUNNING))

    def stalled(self, *, queued_before: Any, running_before: Any) -> RefineRunQuerySet:
        """Runs whose message may be lost: queued for a while (published after commit, but the broker was
        down, or the worker found no LLM configured), or running long past any sane pass time."""
        return self.filter(
            Q(status=RunStatus.QUEUED, created_at__lt=queued_before)
            | Q(status=RunStatus.RUNNING, started_at__lt=running_before)
        )

    def for_list(self) -> RefineRunQuerySet:
        """What the runs list shows: no drafts or texts (each may be large), only whether the output
        differs from the draft, compared in SQL (``outcome`` reads it)."""
        return self.defer(*RUN_TEXT_FIELDS).annotate(
            draft_changed=Case(When(final_output=F("original_draft"), then=Value(False)), default=Value(True))
        )

    def union_waiting(self) -> RefineRunQuerySet:
        """These runs, and every queued run that said it waits for the LLM (ready as soon as it is back)."""
        return RefineRun.objects.filter(
            Q(pk__in=self.values("pk")) | Q(status=RunStatus.QUEUED, error__startswith="waiting: ")
        )

    def claimable(self, stale_before: Any) -> RefineRunQuerySet:
        """Queued, or running but started before ``stale_before`` (its worker died: acks_late redelivered it)."""
        return self.filter(Q(status=RunStatus.QUEUED) | Q(status=RunStatus.RUNNING, started_at__lt=stale_before))


RUN_TEXT_FIELDS = (
    "task",
    "original_draft",
    "final_output",
    "skip_reason",
    "low_quality_reason",
    "stop_reason",
    "error",
)


class RefineRun(models.Model):
    task = models.TextField()
    original_draft = models.TextField()
    agent = models.CharField(max_length=200, blank=True)
    max_passes = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    skip_reason = models.TextField(blank=True)
    final_output = models.TextField(blank=True)
    # Which pass is the output (0 = the original draft); a person may pick another one on the page.
    output_pass = models.PositiveSmallIntegerField(null=True, blank=True)
    output_chosen_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    converged = models.BooleanField(default=False)
    rolled_back = models.BooleanField(default=False)
    low_quality = models.BooleanField(default=False)
    low_quality_reason = models.TextField(blank=True)
    # Reflexion on the server: decided when the run is requested (the Reflexion switches then), so a run
    # that ends low-quality queues its own ``low_quality`` lesson job, whichever worker finishes it.
    reflexion = models.BooleanField(default=False)
    reflexion_job = models.CharField(max_length=16, blank=True, help_text="the lesson job a low-quality end queued")
    stop_reason = models.TextField(blank=True)
    error = models.TextField(blank=True)
    pass_count = models.PositiveSmallIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    requested_by = models.ForeignKey(AgentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The workspace the agent named: a token bound to workspaces reads only its own workspaces' runs.
    workspace = models.ForeignKey(Workspace, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)

    objects = RefineRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["agent", "-created_at"], name="refine_run_agent_created"),
            models.Index(fields=["-created_at"], name="refine_run_created"),
            models.Index(fields=["status"], name="refine_run_in_flight", condition=Q(status__in=["queued", "running"])),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=RunStatus.values), name="refine_run_status_valid"),
        ]

    def __str__(self) -> str:
        return f"refine run {self.pk} ({self.agent or 'no agent'}, {self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def outcome(self) -> str:
        """chatcli's pulse labels for a refine: rewrote draft / kept draft / rolled back / failed."""
        if self.status == RunStatus.FAILED:
            return "failed"
        if self.status == RunStatus.SKIPPED:
            return "skipped"
        if not self.is_finished:
            return self.status
        if self.rolled_back:
            return "rolled back"
        changed = self.__dict__.get("draft_changed")  # annotated by ``for_list``: the texts stay unloaded
        if changed is None:
            changed = self.final_output != self.original_draft
        return "rewrote draft" if changed else "kept draft"

    @property
    def metadata(self) -> dict[str, str]:
        meta: dict[str, str] = {}
        if self.rolled_back:
            meta["refine_rolled_back"] = "true"
        if self.low_quality:
            meta["refine_low_quality"] = "true"
            meta["refine_low_quality_reason"] = self.low_quality_reason
        return meta

    def text_of_pass(self, number: int) -> str:
        if number == 0:
            return self.original_draft
        return self.passes.get(number=number).revised

    def choose_output(self, number: int, *, user: Any) -> None:
        """Make pass ``number`` (0 = the original) the run's output."""
        self.final_output = self.text_of_pass(number)
        self.output_pass = number
        self.output_chosen_by = user
        self.save(update_fields=["final_output", "output_pass", "output_chosen_by"])


class RefinePass(models.Model):
    run = models.ForeignKey(RefineRun, on_delete=models.CASCADE, related_name="passes")
    number = models.PositiveSmallIntegerField()
    critique = models.TextField(blank=True)
    critique_bullets = models.JSONField(default=list, blank=True)
    revised = models.TextField(blank=True)
    raw_reply = models.TextField(blank=True)
    protocol_ok = models.BooleanField(default=True)
    similarity_to_original = models.FloatField()
    best_similarity = models.FloatField()
    # {"original": {"char": {...}, "jaccard": {...}, "embedding"?: {...}}, "previous": {...}}
    scores = models.JSONField(default=dict, blank=True)
    guard_check = models.JSONField(null=True, blank=True)
    convergence_check = models.JSONField(null=True, blank=True)
    converged = models.BooleanField(default=False)
    decision = models.CharField(max_length=20)
    decided_by = models.CharField(max_length=30, blank=True)
    reason = models.TextField(blank=True)
    degraded_from = models.CharField(max_length=40, blank=True)
    latency_ms = models.FloatField(default=0)
    model = models.CharField(max_length=200, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    proposed_lesson = models.ForeignKey(
        "lessons.Lesson", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "number"]
        verbose_name_plural = "refine passes"
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="refine_pass_unique_number")]

    def __str__(self) -> str:
        return f"pass {self.number} of run {self.run_id}"

    def score(self, against: str, scorer: str) -> float | None:
        value = (self.scores.get(against) or {}).get(scorer)
        return None if value is None else float(value["similarity"])


class RefineMode(models.TextChoices):
    ON = "on", "on (always refine)"
    OFF = "off", "off (never refine)"
    ONCE = "once", "once (refine the next run, then auto)"
    AUTO = "auto", "auto (follow LESSONBOARD_REFINE_ENABLED)"


class AgentRefineModeQuerySet(models.QuerySet["AgentRefineMode"]):
    def mode_for(self, agent: str, workspace: Workspace | None = None) -> str:
        """The agent's mode in ``workspace`` (modes are per workspace: another tenant's agent of the same
        name has its own; ``None`` is the workspace-less pool's)."""
        row = self.filter(agent=agent.strip().lower(), workspace=workspace).first()
        return row.mode if row else RefineMode.AUTO


class AgentRefineMode(models.Model):
    """chatcli's session override ``/refine on|off|once|auto``, kept per agent (names compared lowercased)."""

    agent = models.CharField(max_length=200)
    workspace = models.ForeignKey(Workspace, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    mode = models.CharField(max_length=10, choices=RefineMode.choices, default=RefineMode.AUTO)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    updated_by_token = models.ForeignKey(AgentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    objects = AgentRefineModeQuerySet.as_manager()

    class Meta:
        ordering = ["agent"]
        constraints = [
            models.CheckConstraint(condition=Q(mode__in=RefineMode.values), name="refine_mode_valid"),
            models.UniqueConstraint(
                fields=["workspace", "agent"], name="refine_mode_unique_agent", nulls_distinct=False
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent}: {self.mode}"
