"""doc2query: with an LLM configured, saving a lesson queues the LLM's "applies when" phrasings on the
``llm`` queue; the task writes them through the gateway (recorded as purpose ``doc2query``), they are
embedded with the lesson while they match its text, and the lesson page shows them escaped. The fake
OpenAI server answers; the quality of real phrasings is not measured here (docs/lessons.md#doc2query)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from celery.signals import before_task_publish

from lessonboard import llm, pauses
from lessonboard.models import LLMCall
from lessons import doc2query, embeddings, retrieval, vectors
from lessons.lesson_vectors import lesson_texts
from lessons.models import Lesson
from lessons.store import edit_lesson, persist_lesson
from lessons.tasks import doc2query_missing
from tests.fakes.openai_server import FakeOpenAIServer, Reply

pytestmark = pytest.mark.django_db

PHRASINGS = (
    "Here are the tasks:\n"
    "1. Put the /me and /cart endpoints behind Cloudflare\n"
    "2. Add a CDN in front of the account dashboard\n"
    "- Cache the logged-in user's profile API at the edge\n"
    "- cache the logged-in user's profile API at the edge\n"
)


@pytest.fixture
def on(settings: Any) -> None:
    settings.LESSONS_DOC2QUERY = True  # the harness turns it off for the rest of the suite


@pytest.fixture
def published() -> Iterator[list[tuple[str, list[Any], str]]]:
    """(task name, args, routing key) of every task this process publishes."""
    sent: list[tuple[str, list[Any], str]] = []

    def record(sender: str | None = None, body: Any = None, routing_key: str = "", **kwargs: Any) -> None:
        args = body[0] if isinstance(body, tuple | list) and body else []
        sent.append((sender or "", list(args), routing_key))

    before_task_publish.connect(record, weak=False)
    yield sent
    before_task_publish.disconnect(record)


def cdn_lesson() -> Lesson:
    return persist_lesson(
        situation="serving personalised responses behind a caching proxy",
        mistake="cached pages with one user's data were served to other users",
        correction="mark per-user responses private or vary on the session cookie",
        tags=["caching"],
        trigger="error",
    ).lesson


def doc2query_sent(published: list[tuple[str, list[Any], str]]) -> list[tuple[list[Any], str]]:
    return [(args, key) for name, args, key in published if name == "lessons.tasks.write_applies_when"]


def test_replies_are_read_as_models_write_them() -> None:
    assert doc2query.parse(PHRASINGS) == [
        "Put the /me and /cart endpoints behind Cloudflare",
        "Add a CDN in front of the account dashboard",
        "Cache the logged-in user's profile API at the edge",
    ]
    assert doc2query.parse("<think>the user wants tasks</think>```\n* one concrete task here\n```") == [
        "one concrete task here"
    ]
    assert len(doc2query.parse("\n".join(f"task number {i} to do" for i in range(9)))) == doc2query.MAX_PHRASINGS
    assert len(doc2query.parse("x" * 1000)[0]) == doc2query.MAX_CHARS
    with pytest.raises(llm.PermanentLLMError, match="refused"):
        doc2query.parse("I'm sorry, but I can't help with that.")
    with pytest.raises(llm.PermanentLLMError, match="no phrasing"):
        doc2query.parse("<think>only thinking</think>")


def test_without_an_llm_nothing_is_queued_or_asked(
    on: None, published: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        lesson = cdn_lesson()
    assert doc2query_sent(published) == []
    assert doc2query.write(lesson.pk).startswith("waiting: ")
    assert doc2query_missing() == 0
    assert LLMCall.objects.count() == 0
    assert Lesson.objects.get(pk=lesson.pk).applies_when == []


def test_off_by_the_setting_even_with_an_llm(
    fake_openai: FakeOpenAIServer, settings: Any, published: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    settings.LESSONS_DOC2QUERY = False
    with django_capture_on_commit_callbacks(execute=True):
        cdn_lesson()
    assert doc2query_sent(published) == []
    assert fake_openai.chat_requests() == []


def test_saving_and_editing_a_lesson_queue_phrasings_on_the_llm_queue(
    on: None, fake_openai: FakeOpenAIServer, published: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        lesson = cdn_lesson()
    assert doc2query_sent(published) == [([lesson.pk], "llm")]
    with django_capture_on_commit_callbacks(execute=True):
        edit_lesson(lesson, correction="send Cache-Control: private for per-user responses", actor="test")
    assert doc2query_sent(published)[-1] == ([lesson.pk], "llm")
    with django_capture_on_commit_callbacks(execute=True):
        edit_lesson(Lesson.objects.get(pk=lesson.pk), confidence=0.9, actor="test")  # text unchanged
    assert len(doc2query_sent(published)) == 2
    assert fake_openai.chat_requests() == []  # nothing asked in the saving thread


def test_the_task_writes_records_and_embeds_the_phrasings(
    on: None, fake_openai: FakeOpenAIServer, published: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    lesson = cdn_lesson()
    vectors.embed_pending()
    before = np.asarray(Lesson.objects.get(pk=lesson.pk).embedding)
    fake_openai.script(PHRASINGS)
    with django_capture_on_commit_callbacks(execute=True):
        assert doc2query.write(lesson.pk) == "written"
    assert next(args for name, args, _ in published if name == "lessons.tasks.embed_lessons")[0] == [lesson.pk]
    assert doc2query_sent(published) == []  # storing phrasings does not ask for new ones
    stored = Lesson.objects.get(pk=lesson.pk)
    assert stored.applies_when[0] == "Put the /me and /cart endpoints behind Cloudflare"
    assert stored.applies_when_for == doc2query.digest(stored) and stored.applies_when_at is not None
    [request] = fake_openai.chat_requests()
    assert "serving personalised responses behind a caching proxy" in request.json["messages"][1]["content"]
    call = LLMCall.objects.get()
    assert (call.purpose, call.prompt_name, call.prompt_version, call.outcome) == (
        "doc2query",
        "doc2query",
        doc2query.PROMPT_VERSION,
        "ok",
    )
    provider = embeddings.provider()
    assert provider is not None
    assert lesson_texts(stored, provider)[-1] == "\n".join(stored.applies_when)
    vectors.embed_ids([lesson.pk])
    after = np.asarray(Lesson.objects.get(pk=lesson.pk).embedding)
    assert not np.allclose(before, after)
    # a redelivered task finds them written for this text and asks nothing
    assert doc2query.write(lesson.pk) == "current"
    assert len(fake_openai.chat_requests()) == 1


def test_retrieval_finds_the_lesson_closer_through_its_phrasings(on: None, fake_openai: FakeOpenAIServer) -> None:
    lesson = cdn_lesson()
    persist_lesson(
        situation="deploying a static site to a CDN",
        mistake="old assets were served after the deploy",
        correction="fingerprint asset file names and purge the CDN cache",
        tags=["deploy"],
        trigger="error",
    )
    vectors.embed_pending()
    task = "put the /me and /cart endpoints behind Cloudflare"

    def vector_score() -> float:
        hits = retrieval.search(task, k=5, branches=("vector",), floor=False).hits
        return next(h.branches["vector"].score for h in hits if h.lesson.pk == lesson.pk)

    without = vector_score()
    fake_openai.script(PHRASINGS)
    assert doc2query.write(lesson.pk) == "written"
    vectors.embed_ids([lesson.pk])
    hits = retrieval.search(task, k=5, branches=("vector",), floor=False).hits
    assert hits[0].lesson.pk == lesson.pk
    assert vector_score() > without + 0.05


def test_an_edit_makes_them_stale_until_new_ones_are_written(
    on: None, fake_openai: FakeOpenAIServer, client_as: Any, carol: Any
) -> None:
    lesson = cdn_lesson()
    fake_openai.script("1. Cache the <script>alert(1)</script> profile API at the edge\n2. Put /me behind a CDN")
    assert doc2query.write(lesson.pk) == "written"
    html = client_as(carol).get(f"/lessons/{lesson.pk}/").content.decode()
    assert "Cache the &lt;script&gt;alert(1)&lt;/script&gt; profile API" in html
    assert "<script>alert(1)" not in html and "embedded with the lesson" in html
    edited = edit_lesson(Lesson.objects.get(pk=lesson.pk), correction="send Cache-Control: private", actor="test")
    provider = embeddings.provider()
    assert provider is not None
    assert doc2query.current(edited) == [] and len(lesson_texts(edited, provider)) == 2  # whole + situation
    assert "for an earlier version of its text" in client_as(carol).get(f"/lessons/{lesson.pk}/").content.decode()
    assert doc2query.missing() == [lesson.pk]  # the sweep catches it if the edit's own task was lost
    fake_openai.script("1. Mark the account page private in the CDN config")
    assert doc2query.write(lesson.pk) == "written"
    assert doc2query.current(Lesson.objects.get(pk=lesson.pk)) == ["Mark the account page private in the CDN config"]


def test_a_refusal_is_recorded_once_and_the_sweep_fills_only_what_is_missing(
    on: None, fake_openai: FakeOpenAIServer, published: list[Any]
) -> None:
    refused = cdn_lesson()
    fake_openai.script(Reply(text="I'm sorry, but I can't help with that."))
    assert doc2query.write(refused.pk).startswith("failed: ")
    assert Lesson.objects.get(pk=refused.pk).applies_when == []
    never = persist_lesson(
        situation="editing a very large Go source file",
        mistake="rewrote the whole file",
        correction="use the Edit tool on the changed lines",
        tags=["go"],
        trigger="error",
    ).lesson
    assert doc2query.missing() == [never.pk]  # the refused one is not asked again until an edit
    reinforced = Lesson.objects.get(pk=refused.pk)
    Lesson.objects.filter(pk=refused.pk).update(updated_at=reinforced.updated_at + timedelta(seconds=60))
    assert doc2query.missing() == [never.pk]  # a change that left the text alone costs no call either
    assert doc2query_missing() == 1
    assert doc2query_sent(published) == [([never.pk], "llm")]
    assert doc2query.page_state(Lesson.objects.get(pk=refused.pk))["status"].startswith("None: the LLM's answer")


def test_a_pause_of_the_llm_work_holds_it(on: None, fake_openai: FakeOpenAIServer, alice: Any) -> None:
    lesson = cdn_lesson()
    assert pauses.pause("llm", user=alice, why="test")
    assert doc2query.write(lesson.pk).startswith("waiting: ")
    assert doc2query_missing() == 0
    assert fake_openai.chat_requests() == []
