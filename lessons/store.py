"""The one way lessons enter the store: ``persist_lesson``.

Callers: the queue (one DB transaction with the job's state), manual lessons, imports, approved proposals.
The dedup rules of chatcli (exact duplicate / near duplicate → reinforce; same-subject overlap →
supersede, spec §11.3) live here; every change writes a ``LessonVersion``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from django.db import transaction
from django.utils import timezone

from lessonboard.models import Workspace
from lessons.content import fact_content, fact_id
from lessons.models import Lesson, LessonStatus, LessonVersion, VersionAction

HALF_LIFE_DAYS = 30.0

Action = Literal["created", "reinforced", "superseded", "unchanged"]


@dataclass(frozen=True)
class PersistResult:
    lesson: Lesson
    action: Action


def chatcli_score(access_count: int, days_since_access: float, confidence: float) -> float:
    """``(1 + ln(1 + access_count)) × 2^(−days/half_life) × (0.5 + confidence)`` (spec §11.2)."""
    return (1 + math.log(1 + access_count)) * 2 ** (-days_since_access / HALF_LIFE_DAYS) * (0.5 + confidence)


def record_version(lesson: Lesson, action: str, *, actor: str, reason: str = "", user: Any = None) -> LessonVersion:
    last = lesson.versions.order_by("-number").values_list("number", flat=True).first() or 0
    return LessonVersion.objects.create(
        lesson=lesson,
        number=last + 1,
        action=action,
        snapshot=lesson.snapshot(),
        actor=actor,
        actor_user=user if user is not None and getattr(user, "is_authenticated", False) else None,
        reason=reason,
    )


@transaction.atomic
def persist_lesson(
    *,
    situation: str,
    mistake: str,
    correction: str,
    tags: list[str],
    trigger: str,
    workspace: Workspace | None = None,
    agent: str = "",
    source_job_id: str | None = None,
    confidence: float = 0.6,
    provenance: str = "extraction",
    actor: str = "system",
    user: Any = None,
    reason: str = "",
) -> PersistResult:
    """Store a lesson, or reinforce the one it duplicates. Idempotent per ``source_job_id``: persisting
    the same job twice returns the first result's lesson with action ``unchanged``.

    ``tags`` are stored as given (the caller builds chatcli's tag list, e.g. with
    ``lessons.content.lesson_tags``). Safe inside the caller's transaction.
    """
    if source_job_id:
        existing = Lesson.objects.filter(source_job_id=source_job_id).first()
        if existing is not None:
            return PersistResult(existing, "unchanged")
    content = fact_content(situation, mistake, correction, trigger)
    fid = fact_id(content)
    now = timezone.now()
    duplicate = Lesson.objects.select_for_update().filter(fact_id=fid, status=LessonStatus.ACTIVE).first()
    if duplicate is not None:
        duplicate.access_count += 1
        duplicate.last_accessed = now
        duplicate.confidence = min(1.0, max(duplicate.confidence, confidence) + 0.05)
        duplicate.score = chatcli_score(duplicate.access_count, 0.0, duplicate.confidence)
        duplicate.updated_at = now
        duplicate.save(update_fields=["access_count", "last_accessed", "confidence", "score", "updated_at"])
        record_version(duplicate, VersionAction.REINFORCE, actor=actor, user=user, reason=reason or "exact duplicate")
        return PersistResult(duplicate, "reinforced")
    lesson = Lesson.objects.create(
        situation=situation,
        mistake=mistake,
        correction=correction,
        tags=list(tags),
        trigger=trigger,
        content=content,
        fact_id=fid,
        confidence=confidence,
        provenance=provenance,
        access_count=1,
        last_accessed=now,
        score=chatcli_score(1, 0.0, confidence),
        workspace=workspace,
        agent=agent,
        source_job_id=source_job_id or None,
        created_at=now,
        updated_at=now,
    )
    record_version(lesson, VersionAction.CREATE, actor=actor, user=user, reason=reason)
    return PersistResult(lesson, "created")
