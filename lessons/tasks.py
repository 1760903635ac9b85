"""Celery tasks of the lessons app (queue ``embed``). Tasks take ids and re-read the rows."""

from __future__ import annotations

import logging

from celery import shared_task

from lessons import vectors

log = logging.getLogger(__name__)


@shared_task(name="lessons.tasks.embed_lessons", queue="embed", ignore_result=True, acks_late=True)
def embed_lessons(lesson_ids: list[int]) -> int:
    """Compute and store the vectors of these lessons with the configured provider; returns how many."""
    return vectors.embed_ids(lesson_ids)


@shared_task(name="lessons.tasks.embed_missing", queue="embed", ignore_result=True)
def embed_missing(limit: int = 500) -> int:
    """Sweep: lessons without a vector from the current model (a lost task, a model switch)."""
    return vectors.embed_pending(limit=limit)
