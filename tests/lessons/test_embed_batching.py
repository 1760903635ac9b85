"""The ``embed`` task batches: one request fills its model call with other lessons still lacking a
vector, and a later request already served by such a batch costs nothing — unless the lesson was
edited after that vector's text was read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from celery.signals import before_task_publish
from django.utils import timezone

from lessons import embeddings, vectors
from lessons.models import Lesson
from lessons.store import persist_lesson

pytestmark = pytest.mark.django_db


def add(situation: str, correction: str) -> Lesson:
    return persist_lesson(
        situation=situation, mistake="it went wrong", correction=correction, tags=["t"], trigger="error"
    ).lesson


def test_one_request_embeds_the_other_lessons_waiting_for_a_vector() -> None:
    asked = timezone.now()
    a = add("bulk calls to the payments API", "retry 429 with backoff")
    b = add("editing a very large Go source file", "use the Edit tool, not a rewrite")
    c = add("docker build cache invalidated by COPY", "copy the lock file first")
    assert vectors.embed_requested([a.pk], asked) == 3
    assert Lesson.objects.filter(embedding__isnull=True).count() == 0
    stamped = Lesson.objects.get(pk=b.pk).embedded_at
    # b's and c's own requests (made before that batch read their text) are already served
    assert vectors.embed_requested([b.pk], asked) == 0
    assert vectors.embed_requested([c.pk], asked) == 0
    assert Lesson.objects.get(pk=b.pk).embedded_at == stamped


def test_a_request_after_an_edit_embeds_the_new_text_again() -> None:
    a = add("bulk calls to the payments API", "retry 429 with backoff")
    assert vectors.embed_requested([a.pk], timezone.now()) == 1
    before = Lesson.objects.get(pk=a.pk).embedding
    Lesson.objects.filter(pk=a.pk).update(correction="respect the Retry-After header, then back off")
    assert vectors.embed_requested([a.pk], timezone.now()) == 1
    after = Lesson.objects.get(pk=a.pk).embedding
    assert list(after) != list(before)


@pytest.fixture
def embed_new_sent() -> Iterator[list[str]]:
    """The ids of ``embed_new`` tasks this process publishes (Celery's own publish signal)."""
    sent: list[str] = []

    def count(sender: str | None = None, headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if sender == "lessons.tasks.embed_new":
            sent.append((headers or {}).get("id", ""))

    before_task_publish.connect(count, weak=False)
    yield sent
    before_task_publish.disconnect(count)


@pytest.mark.django_db(transaction=True)  # the task is queued after the commit
def test_new_lessons_saved_while_an_embed_task_waits_share_it(embed_new_sent: list[str]) -> None:
    a = add("bulk calls to the payments API", "retry 429 with backoff")
    b = add("editing a very large Go source file", "use the Edit tool, not a rewrite")
    assert len(embed_new_sent) == 1  # b rode on a's task
    # The task embeds every lesson without a vector at its start, b included (a session worker may
    # have run it first: either way both have their vector)…
    vectors.embed_new()
    assert Lesson.objects.filter(pk__in=[a.pk, b.pk], embedding__isnull=True).count() == 0
    # …and, having started, no longer covers lessons saved after it: the next one queues its own.
    add("docker build cache invalidated by COPY", "copy the lock file first")
    assert len(embed_new_sent) == 2


class EditedWhileEmbedding:
    """The configured provider, with the lesson's text changed while its batch is being embedded: the
    race between a batch that has read a lesson and an edit committed before the batch stores it."""

    name = "local"

    def __init__(self, lesson_pk: int) -> None:
        inner = embeddings.provider()
        assert inner is not None
        self.inner = inner
        self.model_id = inner.model_id
        self.dimensions = inner.dimensions
        self.lesson_pk = lesson_pk
        self.edited_at = timezone.now()

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        Lesson.objects.filter(pk=self.lesson_pk).update(correction="respect the Retry-After header")
        self.edited_at = timezone.now()
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def test_an_edit_made_while_its_old_text_is_embedded_is_embedded_again() -> None:
    a = add("bulk calls to the payments API", "retry 429 with backoff")
    racing = EditedWhileEmbedding(a.pk)
    assert vectors.embed_ids([a.pk], racing) == 1
    stale = Lesson.objects.get(pk=a.pk)
    assert stale.embedded_at is not None and stale.embedded_at < racing.edited_at  # stamped when read
    # the edit's own request (made after the edit) is not taken as served by the stale vector
    assert vectors.embed_requested([a.pk], racing.edited_at) == 1
    assert not np.array_equal(np.asarray(Lesson.objects.get(pk=a.pk).embedding), np.asarray(stale.embedding))
