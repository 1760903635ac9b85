"""Overview counts for lessons (``lessons.apps`` registers them): one aggregate over the lessons table,
shared through the cache for ``LESSONQ_COUNTS_TTL`` as the queue's tab counts are, instead of three
``COUNT(*)`` per Overview poll and viewer (docs/operations.md#operator-pages)."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Q

from lessonboard import overview

KEY = "lessons:overview-counts"


def lesson_counts() -> dict[str, int]:
    """``active``, ``retired`` (archived or superseded; tombstones are neither) and ``unembedded`` (active,
    no vector yet), from one statement, cached."""
    from lessons.models import Lesson, LessonStatus

    cached = cache.get(KEY)
    if cached is not None:
        return dict(cached)
    active = Q(status=LessonStatus.ACTIVE)
    counts = Lesson.objects.aggregate(
        active=Count("pk", filter=active),
        retired=Count("pk", filter=Q(status__in=[LessonStatus.ARCHIVED, LessonStatus.SUPERSEDED])),
        unembedded=Count("pk", filter=active & Q(embedding__isnull=True)),
    )
    cache.set(KEY, counts, settings.LESSONQ_COUNTS_TTL)
    return counts


def forget() -> None:
    cache.delete(KEY)


def counts() -> list[overview.Count]:
    def of(name: str) -> Callable[[], int]:
        return lambda: lesson_counts()[name]

    return [
        overview.Count("Lessons", "Active lessons", of("active"), "lessons:search"),
        overview.Count("Lessons", "Archived or superseded", of("retired"), None),
        overview.Count("Lessons", "Active lessons waiting for a vector", of("unembedded"), None),
    ]


def register() -> None:
    overview.add(counts())
