"""Rows of the learning loop: one ``Retrieval`` per retrieve call, one ``Served`` per lesson it returned,
and one ``LessonUsage`` per lesson ever served (its counts and usefulness, kept current on each outcome)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone
from pgvector.django import VectorField


class RetrievalQuerySet(models.QuerySet["Retrieval"]):
    def gaps(self) -> RetrievalQuerySet:
        """Retrievals for which nothing applied, not dismissed by a person."""
        return self.filter(gap=True, gap_dismissed_at__isnull=True)

    def with_outcome(self) -> RetrievalQuerySet:
        return self.filter(success__isnull=False)


class Retrieval(models.Model):
    """One retrieve call: the task (cut to ``RETRIEVAL_LOG_TASK_MAX``), who asked, what came back."""

    task = models.TextField()
    agent = models.CharField(max_length=200, blank=True)
    workspace = models.CharField(max_length=100, blank=True)
    token = models.ForeignKey("lessonboard.AgentToken", null=True, blank=True, on_delete=models.SET_NULL)
    k = models.PositiveSmallIntegerField(default=5)
    returned = models.PositiveSmallIntegerField(default=0)
    # Nothing applied: the retrieval returned no lesson (the relevance floor left none).
    gap = models.BooleanField(default=False)
    gap_dismissed_at = models.DateTimeField(null=True, blank=True)
    # Set with gap_dismissed_at when the gap closed on its own: this lesson would now be served for the task.
    gap_answered_by = models.ForeignKey(
        "lessons.Lesson", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The task's vector, filled by the embed worker after the answer (gaps are grouped by it, and the impact
    # preview ranks a pending lesson against it). Unsized: the model may change; nothing indexes it.
    embedding = VectorField(null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)
    # How the task went, as the agent reported it (an outcome report, or a trigger naming this retrieval).
    success = models.BooleanField(null=True, blank=True)
    outcome_note = models.TextField(blank=True)
    outcome_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = RetrievalQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["agent", "created_at"], name="retrieval_agent_created"),
            models.Index(
                fields=["-created_at"], name="retrieval_open_gaps", condition=Q(gap=True, gap_dismissed_at__isnull=True)
            ),
        ]

    def __str__(self) -> str:
        return f"retrieval {self.pk}: {self.task[:60]}"


class Served(models.Model):
    """A lesson a retrieval returned, at ``rank`` (1 = first) with its fused ``score``."""

    retrieval = models.ForeignKey(Retrieval, on_delete=models.CASCADE, related_name="served")
    lesson = models.ForeignKey("lessons.Lesson", on_delete=models.CASCADE, related_name="served")
    rank = models.PositiveSmallIntegerField()
    score = models.FloatField()

    class Meta:
        ordering = ["retrieval", "rank"]
        constraints = [models.UniqueConstraint(fields=["retrieval", "lesson"], name="served_once_per_retrieval")]
        indexes = [models.Index(fields=["lesson", "retrieval"], name="served_lesson")]

    def __str__(self) -> str:
        return f"lesson {self.lesson_id} at #{self.rank} in retrieval {self.retrieval_id}"


class LessonUsage(models.Model):
    """A lesson's record as served: how often, how the tasks went, and whether that beats the agents'
    baselines. ``usefulness`` is NULL until ``USEFULNESS_MIN_SAMPLES`` outcomes exist."""

    lesson = models.OneToOneField("lessons.Lesson", on_delete=models.CASCADE, related_name="usage", primary_key=True)
    served = models.PositiveIntegerField(default=0)
    outcomes = models.PositiveIntegerField(default=0)
    successes = models.PositiveIntegerField(default=0)
    # Mean over the outcomes of (success − that agent's baseline success rate): > 0 helps, < 0 hurts.
    usefulness = models.FloatField(null=True, blank=True)
    flagged = models.BooleanField(default=False, help_text="served often and followed by failures: review it")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "lesson usage"

    def __str__(self) -> str:
        return f"lesson {self.lesson_id}: served {self.served}, {self.successes}/{self.outcomes} went well"

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.outcomes if self.outcomes else None

    @property
    def baseline(self) -> float | None:
        """The success rate these tasks' agents have anyway, as ``usefulness`` measured it: the mean of each
        outcome's agent baseline, which is the success rate minus the usefulness. ``None`` while usefulness is."""
        if self.usefulness is None or self.success_rate is None:
            return None
        return self.success_rate - self.usefulness
