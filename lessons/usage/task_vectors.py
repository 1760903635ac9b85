"""The task vector of a logged retrieval is the embed worker's job (``lessons.tasks.embed_retrieval``): the
message that asks for it, sent by the log for a new retrieval and by the gaps refresh for a gap whose
vector is another model's."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction

from lessonboard.celery import app

log = logging.getLogger(__name__)

EMBED_RETRIEVAL = "lessons.tasks.embed_retrieval"  # the task (lessons/tasks.py) and its queue, ``embed``


def schedule_task_embedding(retrieval_id: int) -> None:
    """Queue the embed worker for this retrieval's task once the transaction commits; a broker that is
    down costs only the gap grouping and impact preview of this one row (they skip rows with no vector)."""
    if settings.EMBEDDING_PROVIDER == "none":
        return

    def send() -> None:
        try:  # published by name, as refine and the queue do: the task module imports this one
            app.send_task(EMBED_RETRIEVAL, args=[retrieval_id], queue="embed")
        except Exception:
            log.warning("lessons: could not queue the embedding of retrieval %s", retrieval_id, exc_info=True)

    transaction.on_commit(send)
