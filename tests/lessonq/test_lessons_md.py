"""chatcli's LESSONS.md: appended for each newly generated lesson, and exportable from the board."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.core.management import call_command

from lessonq.processing import append_lessons_md
from lessons.interchange import LESSONS_MD_HEADER, lessons_md
from lessons.models import Lesson
from lessons.store import persist_lesson

pytestmark = pytest.mark.django_db


def generated(situation: str, **kwargs: Any) -> Lesson:
    return persist_lesson(
        situation=situation,
        mistake=kwargs.get("mistake", "rewrote the whole file"),
        correction=kwargs.get("correction", "edit in place"),
        tags=kwargs.get("tags", ["go", "reflexion", "trigger:error"]),
        trigger=kwargs.get("trigger", "error"),
        source_job_id=kwargs.get("job", "0123456789abcdef"),
    ).lesson


def test_it_renders_chatclis_layout() -> None:
    lesson = generated("editing large Go files", mistake="")
    Lesson.objects.filter(pk=lesson.pk).update(created_at=datetime.fromisoformat("2026-03-01T12:30:45.123456+00:00"))
    lesson.refresh_from_db()
    text = lessons_md([lesson])
    assert text.startswith(
        "# Lessons learned\n\nAuto-generated from agent reflexion. Newest entries appended at the end.\n"
    )
    entry = text[len(LESSONS_MD_HEADER) :]
    assert entry.startswith("\n## ") and " \u2014 trigger: error\n" in entry
    assert "- **Situation:** editing large Go files\n" in entry
    assert "Mistake" not in entry  # empty bullets are left out
    assert entry.endswith("- **Correction:** edit in place\n- **Tags:** go\n")


def test_a_new_generated_lesson_is_appended_to_the_nodes_lessons_md(queue_dir: Any, settings: Any) -> None:
    first = generated("editing large Go files", job="0000000000000001")
    second = generated("migrating a big table", job="0000000000000002", correction="backfill in batches")
    append_lessons_md(first)
    append_lessons_md(second)
    text = (queue_dir / "LESSONS.md").read_text()
    assert text.count("# Lessons learned") == 1 and text.count("\n## ") == 2
    assert text.index("editing large Go files") < text.index("migrating a big table")
    settings.LESSONQ_LESSONS_DOC = False
    append_lessons_md(first)
    assert (queue_dir / "LESSONS.md").read_text() == text


def test_the_board_exports_lessons_md_of_its_generated_lessons(tmp_path: Any) -> None:
    generated("editing large Go files")
    persist_lesson(situation="by hand", mistake="", correction="typed by a person", tags=[], trigger="manual")
    target = tmp_path / "LESSONS.md"
    call_command("lessons", "export", str(target))
    text = target.read_text()
    assert "editing large Go files" in text and "typed by a person" not in text
