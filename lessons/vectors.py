"""Filling the ``embedding`` column: what the ``embed`` task and ``manage.py lessons reembed`` run."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.conf import settings
from django.db import connection
from django.utils import timezone

from lessons import embeddings
from lessons.metrics import LESSONS_EMBEDDED
from lessons.models import Lesson


def embed_ids(lesson_ids: Iterable[int]) -> int:
    """Embed these lessons now (batched); a lesson changed meanwhile is embedded from its current text."""
    provider = embeddings.provider()
    if provider is None:
        return 0
    ids = list(lesson_ids)
    done = 0
    batch = settings.LESSONS_EMBEDDING_BATCH
    for start in range(0, len(ids), batch):
        lessons = list(
            Lesson.objects.filter(pk__in=ids[start : start + batch]).only(
                "id", "situation", "mistake", "correction", "tags"
            )
        )
        if not lessons:
            continue
        vectors = provider.embed_documents([lesson.embedding_text() for lesson in lessons])
        now = timezone.now()
        for lesson, vector in zip(lessons, vectors, strict=True):
            Lesson.objects.filter(pk=lesson.pk).update(
                embedding=vector.tolist(), embedding_model=provider.model_id, embedded_at=now
            )
        done += len(lessons)
        LESSONS_EMBEDDED.labels(model=provider.model_id).inc(len(lessons))
    return done


def embed_pending(
    *, limit: int | None = None, everything: bool = False, progress: Callable[[int, int], None] | None = None
) -> int:
    """Embed every lesson lacking a vector from the current model (or all of them with ``everything``)."""
    model_id = embeddings.expected_model_id()
    if model_id is None:
        return 0
    queryset = Lesson.objects.all() if everything else Lesson.objects.needing_embedding(model_id)
    ids = list(
        queryset.order_by("id").values_list("id", flat=True)[:limit]
        if limit
        else queryset.order_by("id").values_list("id", flat=True)
    )
    total = len(ids)
    done = 0
    batch = settings.LESSONS_EMBEDDING_BATCH
    for start in range(0, total, batch):
        done += embed_ids(ids[start : start + batch])
        if progress is not None:
            progress(done, total)
    return done


def column_dimensions() -> int | None:
    """The dimension of the ``embedding`` column as PostgreSQL has it (``None`` before migrations)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = 'embedding'",
            [Lesson._meta.db_table],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else None


def resize_column(dimensions: int) -> None:
    """Change ``vector(N)`` (all vectors are dropped, the HNSW index rebuilt); for a provider switch."""
    table = connection.ops.quote_name(Lesson._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # ALTER TABLE refuses pending deferred FK checks
        cursor.execute("DROP INDEX IF EXISTS lesson_embedding_hnsw")
        cursor.execute(f"UPDATE {table} SET embedding = NULL, embedding_model = '', embedded_at = NULL")  # noqa: S608
        cursor.execute(f"ALTER TABLE {table} ALTER COLUMN embedding TYPE vector({int(dimensions)})")
        cursor.execute(
            f"CREATE INDEX lesson_embedding_hnsw ON {table} USING hnsw (embedding vector_cosine_ops) "
            "WITH (m = 16, ef_construction = 64)"
        )
