"""Filling the ``embedding`` column: what the ``embed`` task and ``manage.py lessons reembed`` run."""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.utils import timezone

from lessons import embeddings
from lessons.lesson_vectors import combine, embed_lessons, lesson_texts
from lessons.metrics import LESSONS_EMBEDDED
from lessons.models import Lesson


def embed_ids(lesson_ids: Iterable[int], provider: embeddings.Provider | None = None) -> int:
    """Embed these lessons now (batched); a lesson changed meanwhile is embedded from its current text.
    ``provider`` defaults to the process-wide one (``reembed --threads`` brings its own)."""
    provider = provider or embeddings.provider()
    if provider is None:
        return 0
    ids = list(lesson_ids)
    done = 0
    batch = settings.EMBEDDING_BATCH
    for start in range(0, len(ids), batch):
        # ``embedded_at`` is when the text was read (not when the vector was stored), so a request made
        # after an edit is known to be served by any vector with a later ``embedded_at``.
        now = timezone.now()
        lessons = list(
            Lesson.objects.filter(pk__in=ids[start : start + batch]).only(
                "id", "situation", "mistake", "correction", "tags", "applies_when", "applies_when_for"
            )
        )
        if not lessons:
            continue
        vectors = embed_lessons(provider, lessons)
        _store_vectors(
            [(lesson.pk, vector) for lesson, vector in zip(lessons, vectors, strict=True)], provider.model_id, now
        )
        done += len(lessons)
        LESSONS_EMBEDDED.labels(model=provider.model_id).inc(len(lessons))
    return done


def embed_requested(lesson_ids: Iterable[int], requested_at: datetime | None = None) -> int:
    """The ``embed`` task: embed these lessons, skipping those whose text was read for a vector after
    ``requested_at`` (an earlier task's batch took them), and fill the batch up with lessons that have
    no vector yet, so a burst of new lessons costs a few model calls instead of one each."""
    model_id = embeddings.expected_model_id()
    if model_id is None:
        return 0
    ids = list(dict.fromkeys(lesson_ids))
    if requested_at is not None:
        done = set(
            Lesson.objects.filter(pk__in=ids, embedding_model=model_id, embedded_at__gte=requested_at).values_list(
                "id", flat=True
            )
        )
        ids = [i for i in ids if i not in done]
    free = settings.EMBEDDING_BATCH - len(ids) % settings.EMBEDDING_BATCH
    if ids and free < settings.EMBEDDING_BATCH:
        ids += list(
            Lesson.objects.filter(embedding__isnull=True)
            .exclude(pk__in=ids)
            .order_by("id")
            .values_list("id", flat=True)[:free]
        )
    return embed_ids(ids) if ids else 0


# New lessons get their vectors from one ``embed_new`` task for many: a lesson saved while such a task
# is queued and not started sends no message of its own, since that task embeds every lesson still
# without a vector when it starts (it clears this key first, so a lesson saved after that point queues
# the next task). The key expires, so a lost message delays new vectors at most this long; the
# ``embed_missing`` sweep is the backstop. Until its vector exists a lesson is found by full text only.
EMBED_NEW_PENDING_KEY = "lessons:embed-new-pending"
EMBED_NEW_PENDING_TTL = 60.0  # seconds
# The task starts this long after the first new lesson of a burst asked for it, so a burst of lesson
# jobs (a few per second per worker) shares one task and one model batch instead of a task each.
EMBED_NEW_DELAY = 1.0  # seconds
EMBED_NEW_MAX_BATCHES = 50  # one task's share; a larger backlog is left to the next task or the sweep


def arm_embed_new() -> bool:
    """``True`` when the caller should send an ``embed_new`` task: none is queued and not started."""
    return bool(cache.add(EMBED_NEW_PENDING_KEY, True, timeout=EMBED_NEW_PENDING_TTL))


def disarm_embed_new() -> None:
    cache.delete(EMBED_NEW_PENDING_KEY)


def embed_new() -> int:
    """The ``embed_new`` task: embed the lessons without a vector at its start, in model-sized batches
    (lessons saved later have queued the next task: this one does not chase them and hold a slot)."""
    if embeddings.expected_model_id() is None:
        return 0
    disarm_embed_new()  # before reading: a lesson committed after this line sends a task of its own
    limit = settings.EMBEDDING_BATCH * EMBED_NEW_MAX_BATCHES
    ids = list(Lesson.objects.filter(embedding__isnull=True).order_by("id").values_list("id", flat=True)[:limit])
    return embed_ids(ids)


def _store_vectors(rows: list[tuple[int, Any]], model_id: str, now: Any) -> None:
    """One UPDATE per batch, not one per lesson (reembed of a large table). ``::vector`` without a
    dimension: the column's own (it may have been resized) is checked by PostgreSQL."""
    table = connection.ops.quote_name(Lesson._meta.db_table)
    values = ", ".join(["(%s::bigint, %s::vector)"] * len(rows))
    params: list[Any] = [model_id, now]
    for pk, vector in rows:
        params += [pk, "[" + ",".join(map(repr, map(float, vector))) + "]"]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS l SET embedding = v.e, embedding_model = %s, embedded_at = %s "  # noqa: S608
            f"FROM (VALUES {values}) AS v(id, e) WHERE l.id = v.id",
            params,
        )


def embed_pending(
    *,
    limit: int | None = None,
    everything: bool = False,
    progress: Callable[[int, int], None] | None = None,
    provider: embeddings.Provider | None = None,
    processes: int = 1,
) -> int:
    """Embed every lesson lacking a vector from the current model (or all of them with ``everything``).
    ``processes`` > 1 with a model that runs best so (``bulk_processes``: ``use``) embeds in that many
    single-threaded worker processes while this one reads and writes the rows."""
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
    batch = settings.EMBEDDING_BATCH
    chunks = [ids[start : start + batch] for start in range(0, total, batch)]
    provider = provider or embeddings.provider()
    if provider is not None and processes > 1 and getattr(provider, "bulk_processes", False) and total > batch:
        return _embed_in_processes(chunks, provider, processes, total, progress)
    done = 0
    for chunk in chunks:
        done += embed_ids(chunk, provider)
        if progress is not None:
            progress(done, total)
    return done


def _embed_in_processes(
    chunks: list[list[int]],
    provider: embeddings.Provider,
    processes: int,
    total: int,
    progress: Callable[[int, int], None] | None,
) -> int:
    """``embed_ids`` for each chunk, the model's work done in ``processes`` worker processes: this one reads
    a chunk's texts and hands them over, and stores the vectors of the oldest chunk in flight while the
    workers embed the next ones. Each chunk is stored in one UPDATE (its own transaction), as before, so a
    run stopped at any point leaves every lesson with its old vector or its new one."""
    done = 0
    todo = iter(chunks)
    in_flight: deque[tuple[Future[Any], list[Lesson], list[int], datetime]] = deque()
    context = multiprocessing.get_context("spawn")  # no fork of this process (its threads, its DB socket)
    with ProcessPoolExecutor(
        processes, mp_context=context, initializer=embeddings.process_init, initargs=(provider.model_id,)
    ) as pool:

        def submit() -> None:
            for chunk in todo:
                now = timezone.now()  # when the text was read, as in ``embed_ids``
                lessons = list(
                    Lesson.objects.filter(pk__in=chunk).only(
                        "id", "situation", "mistake", "correction", "tags", "applies_when", "applies_when_for"
                    )
                )
                if not lessons:
                    continue
                parts = [lesson_texts(lesson, provider) for lesson in lessons]
                flat = [text for texts in parts for text in texts]
                in_flight.append((pool.submit(embeddings.process_embed, flat), lessons, list(map(len, parts)), now))
                return

        for _ in range(2 * processes):  # a chunk running in each worker and one queued behind it
            submit()
        while in_flight:
            future, lessons, counts, now = in_flight.popleft()
            vectors = combine(counts, future.result(), provider.dimensions)
            submit()
            _store_vectors(
                [(lesson.pk, vector) for lesson, vector in zip(lessons, vectors, strict=True)], provider.model_id, now
            )
            done += len(lessons)
            LESSONS_EMBEDDED.labels(model=provider.model_id).inc(len(lessons))
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
