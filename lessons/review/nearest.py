"""The existing memory entries and lessons nearest to a proposal's text, with a similarity and a flag.

Candidate lessons come from the store's hybrid retrieval (``lessons.retrieval.search``: full text,
vectors and tags fused by rank), so an old lesson that says the same thing in other words is found; each
candidate, like each memory entry, is then scored by token Jaccard, which drives the flags shown to the
reviewer (duplicate / near duplicate / possible contradiction / related). Hints, not decisions.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from django.db.models import Q

from lessonboard.models import Workspace
from lessons.models import Lesson, LessonScope, LessonStatus
from lessons.review import memory

logger = logging.getLogger(__name__)

WORD = re.compile(r"[a-z0-9_]+")
NEGATIONS = frozenset({"not", "never", "no", "don", "dont", "doesn", "avoid", "without", "stop", "instead"})
STOP = frozenset({"the", "a", "an", "to", "of", "and", "or", "in", "on", "is", "are", "for", "with", "it", "be", "t"})


@dataclass(frozen=True)
class Neighbour:
    kind: str  # "memory" / "user" entry, or "lesson"
    text: str
    similarity: float
    flag: str  # duplicate / near duplicate / possible contradiction / related
    lesson_id: int | None = None


def words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in STOP}


def similarity(a: str, b: str) -> float:
    wa, wb = words(a), words(b)
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / len(wa | wb)


def flag_for(text: str, other: str, score: float) -> str:
    if text.strip() == other.strip():
        return "duplicate"
    if score >= 0.3 and bool(words(text) & NEGATIONS) != bool(words(other) & NEGATIONS):
        return "possible contradiction"
    if score >= 0.6:
        return "near duplicate"
    return "related"


def nearest(workspace: Workspace, text: str, *, limit: int = 3, floor: float = 0.1) -> list[Neighbour]:
    if not text.strip():
        return []
    found: list[Neighbour] = []
    for target in memory.TARGETS:
        for entry in memory.entries_of(workspace, target):
            score = similarity(text, entry)
            if score >= floor:
                found.append(Neighbour(target, entry, score, flag_for(text, entry, score)))
    for lesson in candidate_lessons(workspace, text, limit=max(limit * 4, 12)):
        body = f"{lesson.situation} {lesson.mistake} {lesson.correction}"
        score = similarity(text, body)
        if score >= floor:
            found.append(Neighbour("lesson", lesson.content, score, flag_for(text, body, score), lesson.pk))
    found.sort(key=lambda n: n.similarity, reverse=True)
    return found[:limit]


def candidate_lessons(workspace: Workspace, text: str, *, limit: int) -> list[Lesson]:
    """The active lessons the workspace's retrieve serves (its own and the shared tier, docs/lessons.md#scopes)
    most like ``text`` by hybrid retrieval; if retrieval fails (say the embedder cannot load), the most
    recently updated of them, so the review page still renders."""
    from lessons.embeddings import EmbeddingError
    from lessons.retrieval import Filters, search

    try:
        # No retrieval floor: a reviewer compares with the nearest lessons whatever their distance.
        result = search(text, k=limit, filters=Filters(workspace=workspace.slug, scope="all"), floor=False)
        return [hit.lesson for hit in result.hits]
    except EmbeddingError:
        logger.warning("nearest: retrieval unavailable, falling back to recent lessons", exc_info=True)
        served = Q(workspace=workspace) | Q(scope=LessonScope.SHARED)
        active = Lesson.objects.filter(served, status=LessonStatus.ACTIVE)
        return list(active.order_by("-updated_at")[:500])
