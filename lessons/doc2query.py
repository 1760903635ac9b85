"""doc2query: "applies when" phrasings of a lesson, written by the LLM at save time and embedded with it.

A lesson states its situation generally; the next task names a concrete case in its own words. When an
LLM is configured (and ``LESSONBOARD_LESSONS_DOC2QUERY`` is turned on; it is off by default), saving a lesson whose
text changed queues ``lessons.tasks.write_applies_when`` on the ``llm`` queue after the commit. The task
asks the model, through the gateway (purpose ``doc2query``, the node's LLM slots), for a few short tasks
this lesson applies to, stores them on the lesson with a digest of the text they were written for, and
queues the lesson's embedding again: ``lessons.lesson_vectors.lesson_texts`` adds them to the texts whose
embeddings are summed into the lesson's one vector, as long as the digest matches the current text (an
edit makes them stale until new ones are written; the page says so). Nothing happens without an LLM, so
the default install is unchanged. A beat sweep fills what a lost message, a pause or an outage left.

Crash points: the model call and the store are in one task (at-least-once: a redelivered task sees the
digest already stored and does nothing); the store re-reads the lesson under a row lock and drops
phrasings written for text that changed meanwhile; the embedding is a separate ``embed`` task queued on
the commit of that store, and the ``embed_missing``/``reembed`` paths embed the same texts.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lessonboard import llm, pauses
from lessonboard.celery import app
from lessonboard.llm import promptfiles

log = logging.getLogger(__name__)

PROMPT_VERSION = "doc2query-v1"
MAX_PHRASINGS = 5
MAX_CHARS = 200  # one phrasing
SWEEP_BATCH = 50
WRITE_TASK = "lessons.tasks.write_applies_when"
EMBED_TASK = "lessons.tasks.embed_lessons"
DOC2QUERY_PROMPT = promptfiles.load(Path(__file__).resolve().parent / "prompts", PROMPT_VERSION)
SYSTEM = DOC2QUERY_PROMPT.text


def enabled() -> bool:
    """Phrasings are written only when the setting is on and an LLM is configured."""
    return bool(settings.LESSONS_DOC2QUERY) and llm.is_configured()


def digest(lesson: Any) -> str:
    """What the phrasings were written for: the embedded text of the lesson (``Lesson.embedding_text``)."""
    return hashlib.sha256(lesson.embedding_text().encode()).hexdigest()[:32]


def current(lesson: Any) -> list[str]:
    """The phrasings that belong to the lesson's current text (empty when none or stale)."""
    phrasings = list(getattr(lesson, "applies_when", None) or [])
    if not phrasings or getattr(lesson, "applies_when_for", "") != digest(lesson):
        return []
    return phrasings


def is_stale(lesson: Any) -> bool:
    return bool(lesson.applies_when) and lesson.applies_when_for != digest(lesson)


def page_state(lesson: Any) -> dict[str, Any]:
    """What the lesson page shows: the phrasings (rendered escaped), whether they are stale, or why
    there are none."""
    if lesson.applies_when:
        return {"phrasings": list(lesson.applies_when), "stale": is_stale(lesson), "status": ""}
    if not enabled():
        status = "None: doc2query writes them when an LLM is configured (LESSONBOARD_LESSONS_DOC2QUERY)."
    elif lesson.applies_when_for == digest(lesson):
        status = "None: the LLM's answer for this text held no usable phrasing."
    else:
        status = "Not written yet: queued for the LLM (the llm queue)."
    return {"phrasings": [], "stale": False, "status": status}


def schedule(lesson_ids: Iterable[int]) -> None:
    """After the caller's commit, queue one ``write_applies_when`` task per lesson (queue ``llm``). A
    broker that is down loses nothing: the sweep writes them later."""
    ids = sorted(set(lesson_ids))
    if not ids or not enabled():
        return

    def send() -> None:
        for pk in ids:
            try:  # published by name: the task module imports this one
                app.send_task(WRITE_TASK, args=[pk], queue="llm")
            except Exception:  # the broker being down must not fail the caller's committed work
                log.warning("lessons: could not queue doc2query for %s; the sweep will", pk, exc_info=True)
                return

    transaction.on_commit(send)


_BULLET = re.compile(r"^\s*(?:[-*•]+|\d{1,2}[.)]|\(\d{1,2}\))\s*")


def parse(text: str) -> list[str]:
    """The phrasings in a reply: reasoning and a fence peeled off, bullets and numbering dropped, each
    line cut to ``MAX_CHARS``, duplicates and a preamble ending in ':' left out, at most ``MAX_PHRASINGS``.
    A refusal or nothing left raises ``PermanentLLMError``."""
    from lessonboard.llm import replies

    refused = replies.refusal(text)
    if refused:
        raise llm.PermanentLLMError(f"doc2query: the model refused: {refused}")
    body, _ = replies.strip_think(text)
    fences = replies.fenced_blocks(body)
    if fences:
        body = fences[0][1]
    out: list[str] = []
    seen: set[str] = set()
    for raw in body.splitlines():
        line = _BULLET.sub("", raw).strip().strip("*_\"'` ").strip()
        if len(line) < 8 or line.endswith(":"):
            continue
        line = line[:MAX_CHARS].strip()
        if line.lower() in seen:
            continue
        seen.add(line.lower())
        out.append(line)
        if len(out) == MAX_PHRASINGS:
            break
    if not out:
        raise llm.PermanentLLMError("doc2query: the reply holds no phrasing")
    return out


def ask(lesson: Any) -> list[str]:
    """One gateway call for ``lesson``'s phrasings (recorded as purpose ``doc2query``)."""
    from lessonboard.llm import usage

    workspace = lesson.workspace.slug if lesson.workspace_id else ""
    with usage.context(
        purpose="doc2query", workspace=workspace, agent=lesson.agent, prompt="doc2query", version=PROMPT_VERSION
    ):
        result = llm.chat(
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"LESSON:\n{lesson.embedding_text()}"}],
            max_tokens=300,
        )
    return parse(result.text)


def write(lesson_id: int) -> str:
    """The task: write and store the phrasings of one lesson, then queue its embedding. Returns what
    happened (``written``, ``current`` when they are already there, ``waiting: …``, ``gone``, ``failed: …``).
    Transient LLM errors propagate (the task retries them); a permanent one is logged and left to an edit."""
    from lessons.models import Lesson, LessonStatus

    if not enabled():
        return "waiting: doc2query is off or no LLM is configured"
    reason = pauses.unavailable_reason("llm")
    if reason:
        return f"waiting: {reason}"
    lesson = Lesson.objects.filter(pk=lesson_id, status=LessonStatus.ACTIVE).select_related("workspace").first()
    if lesson is None:
        return "gone"
    wanted = digest(lesson)
    if lesson.applies_when_for == wanted:
        Lesson.objects.filter(pk=lesson_id).update(applies_when_at=timezone.now())  # looked at: not stale
        return "current"
    try:
        phrasings = ask(lesson)
    except llm.PermanentLLMError as exc:
        # Marked as done for this text (no phrasings), so the sweep does not ask again until an edit.
        log.warning("lessons: doc2query for lesson %s failed: %s", lesson_id, exc)
        Lesson.objects.filter(pk=lesson_id, applies_when_for=lesson.applies_when_for).update(
            applies_when=[], applies_when_for=wanted, applies_when_at=timezone.now()
        )
        return f"failed: {exc}"
    with transaction.atomic():
        locked = Lesson.objects.select_for_update().filter(pk=lesson_id).first()
        if locked is None or digest(locked) != wanted:
            return "gone" if locked is None else "current"  # edited meanwhile: that edit queued its own
        Lesson.objects.filter(pk=lesson_id).update(
            applies_when=phrasings, applies_when_for=wanted, applies_when_at=timezone.now()
        )
        transaction.on_commit(lambda: _send_embedding(lesson_id))
    return "written"


def _send_embedding(lesson_id: int) -> None:
    """The lesson's vector again, now with its phrasings (``lessons.store.schedule_embedding``'s message,
    published by name: the store imports this module). A lost one is left to ``reembed``."""
    if settings.EMBEDDING_PROVIDER == "none":
        return
    try:
        app.send_task(EMBED_TASK, args=[[lesson_id], timezone.now().isoformat()], queue="embed")
    except Exception:
        log.warning("lessons: could not queue the embedding of lesson %s's phrasings", lesson_id, exc_info=True)


def missing(limit: int = SWEEP_BATCH) -> list[int]:
    """Active lessons whose phrasings were never written or are stale (a lost message, a pause, an
    outage, an edit meanwhile), oldest first. Candidates are the lessons changed since their phrasings
    were last looked at; those whose text still matches (a reinforce moved ``updated_at``) are stamped as
    looked at, so they leave the candidates without an LLM call."""
    from django.db.models import F, Q

    from lessons.models import Lesson

    rows = (
        Lesson.objects.active()
        .filter(Q(applies_when_at__isnull=True) | Q(applies_when_at__lt=F("updated_at")))
        .order_by("id")
        .only("id", "situation", "mistake", "correction", "tags", "applies_when_for")[: limit * 4]
    )
    stale: list[int] = []
    current: list[int] = []
    for lesson in rows:
        (current if lesson.applies_when_for == digest(lesson) else stale).append(lesson.pk)
    if current:
        Lesson.objects.filter(pk__in=current).update(applies_when_at=timezone.now())
    return stale[:limit]
