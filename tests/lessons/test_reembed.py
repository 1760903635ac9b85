"""``manage.py lessons reembed``: progress on stderr, its own thread count, the same vectors either way."""

from __future__ import annotations

import numpy as np
import pytest
from django.conf import settings
from django.core.management import call_command

from lessons import embeddings, vectors
from lessons.lesson_vectors import embed_lessons
from lessons.models import Lesson
from lessons.store import persist_lesson

pytestmark = pytest.mark.django_db


SITUATIONS = [
    ("bulk calls to the payments API", "retry 429 with backoff"),
    ("editing a very large Go source file", "use the Edit tool, not a rewrite"),
    ("docker build cache invalidated by COPY", "copy the lock file first"),
    ("a flaky test that sleeps for a second", "poll for the condition instead of sleeping"),
    ("a migration that locks the orders table", "add the index concurrently"),
]


def add_lessons(count: int) -> None:
    for situation, correction in SITUATIONS[:count]:
        persist_lesson(situation=situation, mistake="it went wrong", correction=correction, tags=["t"], trigger="error")


def test_reembed_with_two_threads_reports_progress_and_stores_the_models_vectors(capsys) -> None:
    add_lessons(5)
    assert Lesson.objects.filter(embedding__isnull=True).count() == 5
    call_command("lessons", "reembed", "--threads", "2")
    captured = capsys.readouterr()
    assert "embedded 5 lesson(s); 0 without a vector" in captured.out
    assert "5/5 100%" in captured.err and "ETA 0:00:00" in captured.err
    lessons = list(Lesson.objects.order_by("id"))
    provider = embeddings.provider()
    assert provider is not None
    assert {lesson.embedding_model for lesson in lessons} == {provider.model_id}
    expected = embed_lessons(provider, lessons)  # what the model makes of a lesson (lessons/lesson_vectors.py)
    stored = np.array([lesson.embedding for lesson in lessons], dtype=np.float32)
    np.testing.assert_allclose(stored, expected, atol=1e-6)


def test_reembed_all_recomputes_every_vector_and_counts_them(capsys) -> None:
    add_lessons(3)
    call_command("lessons", "reembed", "--threads", "1")
    dimensions = settings.EMBEDDING_DIMENSIONS
    Lesson.objects.update(embedding=[0.0] * (dimensions - 1) + [1.0])
    call_command("lessons", "reembed", "--all", "--threads", "1")
    assert "embedded 3 lesson(s)" in capsys.readouterr().out
    first = Lesson.objects.order_by("id").first()
    assert first is not None and float(np.asarray(first.embedding)[-1]) != 1.0


def test_reembed_in_worker_processes_stores_the_same_vectors_batch_by_batch(settings) -> None:
    """``use`` embeds a bulk run in single-threaded worker processes (``processes``); the vectors are the
    model's (up to float rounding) and each batch is stored and counted as it completes."""
    provider = embeddings.provider()
    assert provider is not None
    if not getattr(provider, "bulk_processes", False):
        pytest.skip("the configured model embeds in one process")
    add_lessons(5)
    settings.EMBEDDING_BATCH = 2
    seen: list[tuple[int, int]] = []
    done = vectors.embed_pending(
        everything=True, provider=provider, processes=2, progress=lambda d, t: seen.append((d, t))
    )
    assert done == 5 and seen == [(2, 5), (4, 5), (5, 5)]
    lessons = list(Lesson.objects.order_by("id"))
    assert {lesson.embedding_model for lesson in lessons} == {provider.model_id}
    stored = np.array([lesson.embedding for lesson in lessons], dtype=np.float32)
    expected = embed_lessons(provider, lessons)
    assert np.min(np.sum(stored * expected, axis=1)) >= 0.9999
