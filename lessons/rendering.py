"""How lessons look outside the database: JSON for the API and exports, chatcli's memory block."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lessons.models import Lesson

MEMORY_HEADER = "## Long-term Memory"


def lesson_json(lesson: Lesson) -> dict[str, Any]:
    return {
        "id": lesson.pk,
        "fact_id": lesson.fact_id,
        "content": lesson.content,
        "category": lesson.category,
        "situation": lesson.situation,
        "mistake": lesson.mistake,
        "correction": lesson.correction,
        "tags": list(lesson.tags),
        "trigger": lesson.trigger,
        "lang": lesson.lang,
        "confidence": lesson.confidence,
        "provenance": lesson.provenance,
        "access_count": lesson.access_count,
        "last_accessed": lesson.last_accessed.isoformat(),
        "occurrences": lesson.occurrences,
        "last_seen": lesson.last_seen.isoformat() if lesson.last_seen else None,
        "score": lesson.score,
        "status": lesson.status,
        "scope": lesson.scope,
        "workspace": lesson.workspace.slug if lesson.workspace_id and lesson.workspace else None,
        "agent": lesson.agent,
        "source_job_id": lesson.source_job_id,
        "created_at": lesson.created_at.isoformat(),
        "updated_at": lesson.updated_at.isoformat(),
    }


def source_line(lesson: Lesson) -> str:
    """Where a served lesson comes from, as a label line in the style of its content's own
    (``LESSON:``/``MISTAKE:``/``CORRECTION:``/``TRIGGER:``): ``SCOPE: shared`` for the team-wide tier,
    ``SCOPE: workspace <slug>`` for a workspace's, ``SCOPE: no workspace`` for the workspace-less pool."""
    if lesson.scope == "shared":
        return "SCOPE: shared"
    slug = lesson.workspace.slug if lesson.workspace_id and lesson.workspace else ""
    return f"SCOPE: workspace {slug}" if slug else "SCOPE: no workspace"


def memory_block(lessons: Iterable[Lesson]) -> str:
    """chatcli's retrieval rendering (docs/compat/chatcli.md#dedupe): a header, then ``- [lesson] <content>`` per fact
    (the content keeps its newlines), each fact followed by its ``SCOPE:`` line (docs/lessons.md#scopes): the
    item stays ``- [<category>] `` and label lines, so what reads chatcli's block reads this one.
    No lessons → an empty string (nothing to inject)."""
    lines = [f"- [{lesson.category}] {lesson.content}\n{source_line(lesson)}" for lesson in lessons]
    if not lines:
        return ""
    return MEMORY_HEADER + "\n" + "\n".join(lines)
