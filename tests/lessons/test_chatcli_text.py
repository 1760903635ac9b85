"""chatcli's memory_index.json may hold text PostgreSQL cannot store: imported with NUL and lone surrogates
replaced by U+FFFD; numbers out of range are an import error naming the fact (docs/api.md#input-policy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from lessons import interchange
from lessons.content import fact_content, fact_id
from lessons.models import Lesson

pytestmark = pytest.mark.django_db


def fact(situation: str, **extra: object) -> dict[str, object]:
    content = fact_content(situation=situation, mistake="m", correction="c", trigger="error")
    return {
        "id": fact_id(content) if "\ud800" not in content else "",
        "content": content,
        "category": "lesson",
        "tags": ["t\u0000"],
        "created_at": "2026-06-20T12:00:00Z",
        "last_accessed": "2026-06-20T12:00:00Z",
        "access_count": 1,
        "score": 1.0,
        **extra,
    }


def test_it_imports_chatcli_facts_holding_nul_and_lone_surrogates(tmp_path: Path) -> None:
    path = tmp_path / "memory_index.json"
    half = fact("half \ud800 pair", id="b" * 24, note={"k": "v\u0000"})  # chatcli's id of it: any 24 hex
    path.write_text(json.dumps([fact("nul \u0000 here"), half]))
    report = interchange.import_memory_index(path)
    assert report.created == 2
    situations = sorted(Lesson.objects.values_list("situation", flat=True))
    assert situations == ["half \ufffd pair", "nul \ufffd here"]
    assert Lesson.objects.filter(tags=["t\ufffd"]).count() == 2


def test_an_access_count_beyond_the_column_is_an_import_error_naming_the_fact(tmp_path: Path) -> None:
    path = tmp_path / "memory_index.json"
    path.write_text(json.dumps([fact("ok"), fact("huge", access_count=10**12)]))
    with pytest.raises(CommandError, match=r"memory_index.json\[1\]: 'access_count'"):
        call_command("lessons", "import", str(path))
    assert Lesson.objects.count() == 0  # all or nothing, as documented
