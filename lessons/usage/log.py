"""Recording retrievals: every retrieve call leaves a ``Retrieval`` row with the lessons it served, so
outcomes can be tied back to lessons and empty answers show where knowledge is missing."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from lessons.usage.models import LessonUsage, Retrieval, Served
from lessons.usage.task_vectors import schedule_task_embedding

if TYPE_CHECKING:
    from lessonboard.models import AgentToken
    from lessons.retrieval import Hit

log = logging.getLogger(__name__)


def record_retrieval(
    task: str,
    hits: Sequence[Hit],
    *,
    k: int,
    agent: str = "",
    workspace: str = "",
    token: AgentToken | None = None,
) -> Retrieval | None:
    """Log one retrieve call and count each served lesson; ``None`` when the log is off
    (``RETRIEVAL_LOG=false``). The task's vector is computed afterwards by the embed worker."""
    if not settings.RETRIEVAL_LOG:
        return None
    with transaction.atomic():
        row = Retrieval.objects.create(
            task=task[: settings.RETRIEVAL_LOG_TASK_MAX],
            agent=agent[:200],
            workspace=workspace[:100],
            token=token,
            k=k,
            returned=len(hits),
            gap=not hits,
        )
        Served.objects.bulk_create(
            Served(retrieval=row, lesson=hit.lesson, rank=rank, score=hit.score) for rank, hit in enumerate(hits, 1)
        )
        ids = [hit.lesson.pk for hit in hits]
        LessonUsage.objects.bulk_create([LessonUsage(lesson_id=pk) for pk in ids], ignore_conflicts=True)
        LessonUsage.objects.filter(lesson_id__in=ids).update(served=F("served") + 1)
        schedule_task_embedding(row.pk)
    return row


def embed_task(retrieval_id: int) -> bool:
    """Store the task vector of one retrieval (the embed worker's job); ``False`` when there is no
    provider or the row is gone."""
    from lessons import embeddings

    provider = embeddings.provider()
    row = Retrieval.objects.filter(pk=retrieval_id).only("task", "gap").first()
    if provider is None or row is None:
        return False
    vector = provider.embed_query(row.task)
    Retrieval.objects.filter(pk=retrieval_id).update(embedding=vector.tolist(), embedding_model=provider.model_id)
    if row.gap:  # the maintained gap groups can now place it by its vector
        from lessons.usage import gaps

        gaps.refresh_soon()
    return True


PURGE_BATCH = 5000


def purge_old(now: Any = None) -> int:
    """Delete retrievals older than ``RETRIEVAL_LOG_RETENTION`` (0 keeps them forever); how many rows went
    (the retrievals and what cascaded). A lesson's times served stay; its outcomes, usefulness and flag are
    over the outcomes still in the log (``refresh_usage``)."""
    days = settings.RETRIEVAL_LOG_RETENTION
    if not days:
        return 0
    cutoff = (now or timezone.now()) - timedelta(seconds=days)
    # In batches, reading ids only: a cascading delete loads the rows it deletes, and a retrieval's row
    # holds the task's vector — the first purge after retention was lowered ran out of memory.
    deleted = 0
    while ids := list(
        Retrieval.objects.filter(created_at__lt=cutoff).order_by("id").values_list("id", flat=True)[:PURGE_BATCH]
    ):
        count, _ = Retrieval.objects.filter(id__in=ids).only("id").delete()
        deleted += count
    return deleted
