"""Celery tasks of the lessons app (queue ``embed``). Tasks take ids and re-read the rows."""

from __future__ import annotations

import logging
from datetime import datetime

from celery import shared_task

from lessonboard.llm import TransientLLMError
from lessons import vectors

log = logging.getLogger(__name__)


@shared_task(name="lessons.tasks.embed_lessons", queue="embed", ignore_result=True, acks_late=True)
def embed_lessons(lesson_ids: list[int], requested_at: str | None = None) -> int:
    """Compute and store the vectors of these lessons with the configured provider (batched with other
    lessons still lacking one); returns how many. ``requested_at``: ISO time the caller asked."""
    return vectors.embed_requested(lesson_ids, datetime.fromisoformat(requested_at) if requested_at else None)


@shared_task(name="lessons.tasks.embed_new", queue="embed", ignore_result=True, acks_late=True)
def embed_new() -> int:
    """Vectors for every new lesson still without one (one task serves a burst, ``vectors.embed_new``)."""
    return vectors.embed_new()


@shared_task(name="lessons.tasks.embed_missing", queue="embed", ignore_result=True)
def embed_missing(limit: int = 500) -> int:
    """Sweep: lessons without a vector from the current model (a lost task, a model switch)."""
    return vectors.embed_pending(limit=limit)


@shared_task(name="lessons.tasks.embed_retrieval", queue="embed", ignore_result=True, acks_late=True)
def embed_retrieval(retrieval_id: int) -> bool:
    """The task vector of one logged retrieval (for gap grouping and the impact preview)."""
    from lessons.usage.log import embed_task

    return embed_task(retrieval_id)


@shared_task(name="lessons.tasks.purge_retrievals", ignore_result=True)
def purge_retrievals() -> int:
    """Retention of the retrieval log (``RETRIEVAL_LOG_RETENTION``)."""
    from lessons.usage.log import purge_old

    return purge_old()


@shared_task(name="lessons.tasks.refresh_all_usage", ignore_result=True)
def refresh_all_usage() -> int:
    """Bring every lesson's usefulness up to date with its agents' current baselines."""
    from lessons.usage.outcomes import refresh_usage

    return refresh_usage()


@shared_task(
    name="lessons.tasks.write_applies_when",
    queue="llm",
    ignore_result=True,
    acks_late=True,
    autoretry_for=(TransientLLMError,),
    retry_backoff=30,
    max_retries=5,
)
def write_applies_when(lesson_id: int) -> str:
    """doc2query: the LLM's "applies when" phrasings for one lesson, then its embedding again."""
    from lessons import doc2query

    return doc2query.write(lesson_id)


@shared_task(name="lessons.tasks.doc2query_missing", ignore_result=True)
def doc2query_missing() -> int:
    """Beat: queue phrasings for lessons that never got them (lost message, pause, outage); nothing
    without an LLM or while the LLM work is paused."""
    from lessonboard import pauses
    from lessons import doc2query

    if not doc2query.enabled() or pauses.unavailable_reason("llm"):
        return 0
    ids = doc2query.missing()
    for pk in ids:
        write_applies_when.apply_async(args=[pk], queue="llm")
    return len(ids)
