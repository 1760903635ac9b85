"""Lessons and their history. Every way into the store goes through ``lessons.store.persist_lesson``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import F, Q, Value
from django.db.models.functions import Left
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

from lessonboard.models import Workspace


class LessonStatus(models.TextChoices):
    ACTIVE = "active", "active"
    ARCHIVED = "archived", "archived"
    SUPERSEDED = "superseded", "superseded"
    # Deleted over the API or MCP (``forget_lesson``): a tombstone. The row and its versions stay (it can be
    # restored, and chatcli's export tombstones its fact id, docs/compat/chatcli.md#memory-index); it is
    # never served or listed unless asked for by status.
    DELETED = "deleted", "deleted"


class LessonScope(models.TextChoices):
    """Where a lesson is served (docs/lessons.md#scopes): its own workspace only, or every workspace."""

    WORKSPACE = "workspace", "workspace"
    SHARED = "shared", "shared"


class LessonQuerySet(models.QuerySet["Lesson"]):
    def active(self) -> LessonQuerySet:
        return self.filter(status=LessonStatus.ACTIVE)

    def needing_embedding(self, model_id: str) -> LessonQuerySet:
        """Lessons without a vector from ``model_id`` (never embedded, edited since, or another model's)."""
        return self.filter(Q(embedding__isnull=True) | ~Q(embedding_model=model_id))

    def for_list(self) -> LessonQuerySet:
        """What a list shows: the situation and the correction cut in SQL (``situation_preview``,
        ``correction_preview``); no content, vector, search vector or extra fields."""
        return self.defer(
            "situation",
            "mistake",
            "correction",
            "content",
            "search_vector",
            "term_vector",
            "embedding",
            "chatcli_extra",
            "applies_when",
        ).annotate(
            situation_preview=Left("situation", LIST_PREVIEW_CHARS),
            correction_preview=Left("correction", LIST_PREVIEW_CHARS),
        )


LIST_PREVIEW_CHARS = 600


def _weighted_vector(config: str) -> Any:
    return (
        SearchVector("situation", weight="A", config=config)
        + SearchVector("correction", weight="B", config=config)
        + SearchVector("mistake", "trigger", weight="C", config=config)
    )


class Lesson(models.Model):
    situation = models.TextField()
    mistake = models.TextField()
    correction = models.TextField()
    tags = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    trigger = models.CharField(max_length=50, blank=True)
    # chatcli's four-line fact content (docs/compat/chatcli.md#fact-content) and its 24-hex id (docs/compat/chatcli.md#memory-index).
    content = models.TextField()
    fact_id = models.CharField(max_length=24, db_index=True)
    category = models.CharField(max_length=50, default="lesson")
    confidence = models.FloatField(default=0.6)
    provenance = models.CharField(max_length=300, default="extraction")
    access_count = models.PositiveIntegerField(default=1)
    last_accessed = models.DateTimeField(default=timezone.now)
    score = models.FloatField(default=0.0)
    workspace = models.ForeignKey(Workspace, null=True, blank=True, on_delete=models.SET_NULL, related_name="lessons")
    # ``shared``: the team-wide tier, served to every workspace (its ``workspace`` stays the one it came
    # from, which alone may change it); ``workspace``: served in its own workspace only.
    scope = models.CharField(
        max_length=16, choices=LessonScope.choices, default=LessonScope.WORKSPACE, db_default=LessonScope.WORKSPACE
    )
    agent = models.CharField(max_length=200, blank=True)
    # The JobID of the queue job that produced it (a string, not a FK: lessons do not depend on the queue).
    source_job_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 - NULL keeps the unique constraint partial
    # How often its failure was reported in its workspace (a trigger matching its finished job adds one,
    # docs/queue.md#repeated-failures), and when it was last reported.
    occurrences = models.PositiveIntegerField(default=1)
    last_seen = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=20, choices=LessonStatus.choices, default=LessonStatus.ACTIVE)
    superseded_by = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # The lesson's language ("en", "pt", another ISO 639-1 code, or "" when unknown): given by the
    # API/import/pages or detected (lessons.language.detect). It picks the full-text configuration.
    lang = models.CharField(max_length=8, blank=True, default="")
    # Full-text branch of retrieval: kept by PostgreSQL itself (a stored generated column), stemmed
    # with the configuration of the lesson's language (docs/lessons.md#language).
    search_vector = models.GeneratedField(
        expression=models.Case(
            models.When(lang="en", then=_weighted_vector("english")),
            models.When(lang="pt", then=_weighted_vector("portuguese")),
            default=_weighted_vector("simple"),
        ),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    # Identifier-aware full text (migration 0010, docs/lessons.md#full-text): the language's stems, the
    # words unstemmed and every code-like token whole, by segment and in parts (``lesson_code_terms``).
    term_vector = models.GeneratedField(
        expression=models.Func(
            F("lang"),
            F("situation"),
            F("mistake"),
            F("correction"),
            F("trigger"),
            F("tags"),
            function="lesson_term_vector",
        ),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    # Vector branch: the embedding of ``embedding_text()`` by ``embedding_model`` (NULL until the
    # ``embed`` task has run). The dimension is a setting, checked against the provider at start-up.
    embedding = VectorField(dimensions=settings.EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)
    embedded_at = models.DateTimeField(null=True, blank=True)
    # doc2query (``lessons.doc2query``): "applies when" tasks the LLM wrote for this lesson, embedded with
    # it while ``applies_when_for`` (a digest of ``embedding_text()``) matches the current text.
    # Database defaults too: the bulk loaders (bench/) COPY rows without these columns.
    applies_when = models.JSONField(default=list, db_default=Value([], output_field=models.JSONField()), blank=True)
    applies_when_for = models.CharField(max_length=64, blank=True, default="", db_default="")
    applies_when_at = models.DateTimeField(null=True, blank=True)
    # Fields of a chatcli fact we do not model (``source``, ``source_project``, unknown keys) and the
    # original timestamp strings (nanoseconds), re-emitted on export so a round trip is lossless.
    chatcli_extra = models.JSONField(default=dict, blank=True)

    objects = LessonQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["source_job_id"], condition=Q(source_job_id__isnull=False), name="lesson_unique_source_job"
            ),
            models.CheckConstraint(condition=Q(status__in=LessonStatus.values), name="lesson_status_valid"),
            models.CheckConstraint(condition=Q(scope__in=LessonScope.values), name="lesson_scope_valid"),
        ]
        indexes = [
            GinIndex(fields=["tags"], name="lesson_tags_gin"),
            models.Index(fields=["status", "-created_at"]),
            # The lessons page's default order, newest first over every status: without it each page sorted
            # the whole table (200,000 lessons: ~0.6 s, docs/benchmarks.md#bounded-cost).
            models.Index(fields=["-created_at", "-id"], name="lesson_newest_idx"),
            GinIndex(fields=["search_vector"], name="lesson_search_gin"),
            # The shared tier is small and read by every workspace's retrieve.
            models.Index(fields=["status"], condition=Q(scope="shared"), name="lesson_shared"),
            GinIndex(fields=["workspace", "term_vector"], name="lesson_terms_ws_gin"),
            # What changed since: beat's gap refresh reads the newest of each every tick and the lessons
            # changed since its last run (lessons.usage.gaps), which was a scan of the table each time.
            models.Index(fields=["updated_at"], name="lesson_updated_idx"),
            models.Index(fields=["embedded_at"], name="lesson_embedded_idx"),
            HnswIndex(
                name="lesson_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.situation[:60]}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # A lesson saved without a language gets the detected one (its full-text configuration follows).
        if not self.lang:
            self.lang = self.detected_lang()
            if kwargs.get("update_fields") is not None and self.lang:
                kwargs["update_fields"] = {*kwargs["update_fields"], "lang"}
        super().save(*args, **kwargs)

    def detected_lang(self) -> str:
        from lessons.language import detect

        return detect(f"{self.situation}\n{self.mistake}\n{self.correction}")

    def embedding_text(self) -> str:
        """What gets embedded: the lesson's words without chatcli's line labels, tags last."""
        parts = [self.situation, self.mistake, self.correction]
        if self.tags:
            parts.append(" ".join(t for t in self.tags if t != "reflexion" and not t.startswith("trigger:")))
        return "\n".join(p for p in parts if p.strip())

    def snapshot(self) -> dict[str, Any]:
        """The versioned fields, as stored in ``LessonVersion.snapshot``."""
        return {
            "situation": self.situation,
            "mistake": self.mistake,
            "correction": self.correction,
            "tags": list(self.tags),
            "trigger": self.trigger,
            "content": self.content,
            "fact_id": self.fact_id,
            "confidence": self.confidence,
            "provenance": self.provenance,
            "status": self.status,
            "scope": self.scope,
            "access_count": self.access_count,
            "lang": self.lang,
        }


class VersionAction(models.TextChoices):
    CREATE = "create", "created"
    EDIT = "edit", "edited"
    REINFORCE = "reinforce", "reinforced"
    SUPERSEDE = "supersede", "superseded"
    ARCHIVE = "archive", "archived"
    RESTORE = "restore", "restored"
    MERGE = "merge", "merged"
    DELETE = "delete", "deleted"
    SHARE = "share", "shared"
    UNSHARE = "unshare", "unshared"
    MOVE = "move", "moved to another workspace"  # only migrations move a lesson (lessons 0017)


class LessonVersion(models.Model):
    """One change to a lesson: who or what did it, why, and the lesson's fields after it."""

    lesson = models.ForeignKey(Lesson, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    action = models.CharField(max_length=20, choices=VersionAction.choices)
    snapshot = models.JSONField()
    actor = models.CharField(max_length=200, help_text="user:<name>, token:<name>, job:<id>, import, system…")
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True)
    # The queue job whose lesson this change came from (a reinforce keeps persist_lesson idempotent).
    source_job_id = models.CharField(max_length=64, null=True, blank=True, db_index=True)  # noqa: DJ001
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["lesson", "-number"]
        constraints = [models.UniqueConstraint(fields=["lesson", "number"], name="lesson_version_unique_number")]

    def __str__(self) -> str:
        return f"lesson {self.lesson_id} v{self.number} {self.action}"


from lessons.reflect.models import *  # noqa: E402, F403
from lessons.review.models import *  # noqa: E402, F403  (gated memory writes)
from lessons.usage.models import *  # noqa: E402, F403  (the learning loop)
