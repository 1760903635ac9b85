"""Lessons API for agents: add a manual lesson, retrieve lessons (with chatcli's memory block)."""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest, JsonResponse

from lessonboard.api import ApiError, api_view, json_body, require_str
from lessonboard.models import SLUG_RE, AuditEvent, TokenScope, Workspace
from lessons import retrieval
from lessons.models import Lesson
from lessons.rendering import lesson_json, memory_block
from lessons.store import persist_lesson, persist_manual, record_use

MAX_TEXT = 20_000
MAX_K = 50


def _workspace(data: dict[str, Any]) -> Workspace | None:
    slug = require_str(data, "workspace", required=False, max_length=100)
    if not slug:
        return None
    if not re.match(SLUG_RE, slug):
        raise ApiError("'workspace' must be a slug: lower-case letters, digits, '.', '_' or '-'", field="workspace")
    return Workspace.objects.for_slug(slug)


def _tags(data: dict[str, Any], field: str = "tags") -> list[str]:
    tags = data.get(field)
    if tags is None:
        return []
    if not isinstance(tags, list) or not all(isinstance(t, str) and 0 < len(t) <= 200 for t in tags):
        raise ApiError(f"'{field}' must be a list of non-empty strings (at most 200 characters each)", field=field)
    return [t.strip().lower() for t in tags if t.strip()]


@api_view(TokenScope.FULL)
def create_lesson(request: HttpRequest) -> JsonResponse:
    """``{"text": …}`` → chatcli's manual lesson (``/reflect <text>``); or the structured shape
    ``{"situation", "mistake", "correction", "tags", "trigger"}``. Both take ``workspace``, ``agent``."""
    data = json_body(request, max_bytes=1024 * 1024)
    token = request.agent_token  # type: ignore[attr-defined]
    workspace = _workspace(data)
    agent = require_str(data, "agent", required=False, max_length=200)
    actor = f"token:{token.name}"
    if "text" in data:
        text = require_str(data, "text", max_length=MAX_TEXT).strip()
        if not text:
            raise ApiError("'text' is required", field="text")
        locale = require_str(data, "locale", required=False, max_length=10) or "en"
        if locale not in ("en", "pt"):
            raise ApiError("'locale' must be 'en' or 'pt'", field="locale")
        result = persist_manual(text, locale=locale, workspace=workspace, agent=agent, actor=actor)
    else:
        situation = require_str(data, "situation", max_length=MAX_TEXT)
        correction = require_str(data, "correction", max_length=MAX_TEXT)
        mistake = require_str(data, "mistake", required=False, max_length=MAX_TEXT)
        trigger = require_str(data, "trigger", required=False, max_length=50) or "manual"
        confidence = data.get("confidence", 0.6)
        if not isinstance(confidence, int | float) or isinstance(confidence, bool) or not 0 <= confidence <= 1:
            raise ApiError("'confidence' must be a number between 0 and 1", field="confidence")
        result = persist_lesson(
            situation=situation,
            mistake=mistake,
            correction=correction,
            tags=_tags(data),
            trigger=trigger,
            workspace=workspace,
            agent=agent,
            confidence=float(confidence),
            provenance="manual",
            actor=actor,
            reason="manual lesson (API)",
        )
    AuditEvent.record(
        "lesson.create",
        token=token,
        object_type="lesson",
        object_ids=[result.lesson.pk],
        result={"action": result.action},
    )
    return JsonResponse(
        {
            "action": result.action,
            "message": "lesson persisted to long-term memory (category=lesson)",
            "lesson": lesson_json(result.lesson),
        },
        status=201 if result.action in ("created", "superseded") else 200,
    )


@api_view(TokenScope.FULL)
def retrieve(request: HttpRequest) -> JsonResponse:
    """``{task, k, workspace, tags, hyde}`` → ``{lessons, memory_block, explanation}``; reinforces by use."""
    data = json_body(request, max_bytes=256 * 1024)
    task = require_str(data, "task", max_length=MAX_TEXT)
    k = data.get("k", 5)
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise ApiError(f"'k' must be an integer from 1 to {MAX_K}", field="k")
    hyde = data.get("hyde", False)
    if not isinstance(hyde, bool):
        raise ApiError("'hyde' must be true or false", field="hyde")
    slug = require_str(data, "workspace", required=False, max_length=100)
    filters = retrieval.Filters(workspace=slug, tags=_tags(data))
    result = retrieval.search(task, k=k, filters=filters, hyde=hyde)
    lessons: list[Lesson] = [hit.lesson for hit in result.hits]
    record_use([lesson.pk for lesson in lessons])
    return JsonResponse(
        {
            "lessons": [{**lesson_json(hit.lesson), "retrieval": hit.as_dict()} for hit in result.hits],
            "memory_block": memory_block(lessons),
            "explanation": {key: value for key, value in result.explanation.items() if key != "query"},
        }
    )
