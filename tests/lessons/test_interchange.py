"""chatcli memory_index.json both ways, JSONL with history, and the `lessons` management command."""

import json
import stat
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from lessons import interchange
from lessons.content import fact_content, fact_id
from lessons.models import Lesson, LessonStatus
from lessons.store import edit_lesson, persist_lesson, set_status

pytestmark = pytest.mark.django_db

A = fact_content("edit large file", "tried to rewrite whole file", "use targeted Edit", "error")
B = fact_content("bulk API calls", "no backoff", "retry 429 with backoff", "error")
FACTS = [
    {
        "id": fact_id(A),
        "content": A,
        "category": "lesson",
        "tags": ["go", "edit-file", "reflexion", "trigger:error"],
        "created_at": "2026-06-22T09:00:00.123456789-03:00",
        "last_accessed": "2026-06-23T10:11:12.5-03:00",
        "access_count": 4,
        "score": 2.9134201123,
        "source_project": "/home/dev/proj",
        "confidence": 1,
        "provenance": "extraction",
    },
    {
        "id": "0123456789abcdef01234567",
        "content": "user prefers tabs over spaces",
        "category": "preference",
        "created_at": "2026-06-01T08:00:00Z",
        "last_accessed": "2026-06-01T08:00:00Z",
        "access_count": 1,
        "score": 2.1,
        "source": "conversation",
        "confidence": 0.8,
        "provenance": "user",
    },
    {
        "id": fact_id(B),
        "content": B,
        "category": "lesson",
        "created_at": "2026-06-20T12:00:00Z",
        "last_accessed": "2026-06-20T12:00:00Z",
        "access_count": 1,
        "score": 1.8625,
        "confidence": 0.6,
        "provenance": "extraction",
        "future_key": {"x": 1},
    },
]


@pytest.fixture
def memory_index(tmp_path):
    path = tmp_path / "memory_index.json"
    path.write_text(json.dumps(FACTS, indent=2))
    return path


def test_it_parses_and_formats_rfc3339_nano_times_like_go():
    t = interchange.parse_time("2026-06-22T09:00:00.123456789-03:00")
    assert t.microsecond == 123456 and t.utcoffset().total_seconds() == -3 * 3600
    assert interchange.parse_time("2026-06-20T12:00:00Z").tzinfo is not None
    value = interchange.parse_time("2026-06-20T12:00:00.250+00:00")
    text = interchange.format_time(value)  # the machine's local zone, like Go's time.Local
    assert interchange.parse_time(text) == value and ".25" in text and ".250" not in text
    with pytest.raises(ValueError):
        interchange.parse_time("yesterday")


def test_it_imports_lessons_keeping_ids_and_access_stats_and_leaves_other_facts_alone(memory_index):
    report = interchange.import_memory_index(memory_index)
    assert (report.created, report.skipped_other_facts) == (2, 1)
    lesson = Lesson.objects.get(fact_id=fact_id(A))
    assert lesson.situation == "edit large file" and lesson.correction == "use targeted Edit"
    assert lesson.trigger == "error" and lesson.access_count == 4 and lesson.confidence == 1.0
    assert lesson.score == pytest.approx(2.9134201123)
    assert lesson.tags == ["go", "edit-file", "reflexion", "trigger:error"]
    assert lesson.versions.get().actor == "import"
    assert Lesson.objects.count() == 2
    again = interchange.import_memory_index(memory_index)
    assert (again.created, again.unchanged) == (0, 2)


def test_it_round_trips_memory_index_losslessly(memory_index):
    original = memory_index.read_bytes()
    interchange.import_memory_index(memory_index)
    interchange.export_memory_index(memory_index)
    assert memory_index.read_bytes() == original
    assert stat.S_IMODE(memory_index.stat().st_mode) == 0o600


def test_it_exports_board_changes_and_keeps_the_other_facts(memory_index, tmp_path):
    interchange.import_memory_index(memory_index)
    lesson = Lesson.objects.get(fact_id=fact_id(B))
    edit_lesson(lesson, correction="honour Retry-After", actor="user:bob")
    Lesson.objects.filter(fact_id=fact_id(A)).update(status=LessonStatus.ARCHIVED)
    new = persist_lesson(
        situation="flaky sleep", mistake="sleep(2)", correction="poll", tags=[], trigger="error"
    ).lesson
    interchange.export_memory_index(memory_index)
    facts = json.loads(memory_index.read_text())
    by_id = {f["id"]: f for f in facts}
    assert fact_id(A) not in by_id  # archived on the board
    assert by_id["0123456789abcdef01234567"] == FACTS[1]  # the preference fact, untouched
    edited = Lesson.objects.get(pk=lesson.pk)
    assert by_id[edited.fact_id]["content"].endswith("CORRECTION: honour Retry-After\nTRIGGER: error")
    assert by_id[edited.fact_id]["future_key"] == {"x": 1}
    assert list(by_id[new.fact_id]) == [
        "id",
        "content",
        "category",
        "created_at",
        "last_accessed",
        "access_count",
        "score",
        "confidence",
        "provenance",
    ]
    assert [f["score"] for f in facts] == sorted((f["score"] for f in facts), reverse=True)
    assert not memory_index.read_text().endswith("\n")
    fresh = tmp_path / "other" / "memory_index.json"
    assert interchange.export_memory_index(fresh) == 2 and len(json.loads(fresh.read_text())) == 2


def test_it_round_trips_jsonl_with_history(tmp_path):
    lesson = persist_lesson(
        situation="s1", mistake="m", correction="c1", tags=["a"], trigger="error", source_job_id="job-1"
    ).lesson
    edit_lesson(lesson, correction="c2", actor="user:bob", reason="better")
    Lesson.objects.filter(pk=lesson.pk).update(scope="shared")
    path = tmp_path / "lessons.jsonl"
    assert interchange.export_jsonl(path) == 1
    Lesson.objects.all().delete()
    report = interchange.import_jsonl(path)
    assert report.created == 1
    back = Lesson.objects.get()
    assert back.correction == "c2" and back.source_job_id == "job-1"
    assert back.scope == "shared"  # the shared tier travels with the lesson
    assert [(v.number, v.action, v.reason) for v in back.versions.order_by("number")] == [
        (1, "create", ""),
        (2, "edit", "better"),
    ]
    assert interchange.import_jsonl(path).unchanged == 1


def test_it_refuses_bad_files_with_a_message(tmp_path):
    bad = tmp_path / "memory_index.json"
    bad.write_text("{garbled")
    with pytest.raises(interchange.InterchangeError, match="not valid JSON"):
        interchange.import_memory_index(bad)
    bad.write_text(json.dumps([{"id": "zz", "content": "x", "category": "lesson"}]))
    with pytest.raises(interchange.InterchangeError, match=r"\[0\]: 'id' must be 24"):
        interchange.import_memory_index(bad)
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text('{"lesson": {"fact_id": "a"}}\n')
    with pytest.raises(interchange.InterchangeError, match=r"x\.jsonl:1: missing key"):
        interchange.import_jsonl(jsonl)
    assert Lesson.objects.count() == 0


def test_bad_command_line_input_is_a_message_not_a_traceback(tmp_path):
    """A directory or an unwritable path, a value the database refuses in a JSONL row (a NUL, a trigger
    over 50 characters), a --workspace that is no slug, a token name or a username too long: each a
    CommandError naming what is wrong, nothing written."""
    lesson = persist_lesson(situation="s1", mistake="m", correction="c1", tags=["a"], trigger="error").lesson
    path = tmp_path / "lessons.jsonl"
    interchange.export_jsonl(path)
    Lesson.objects.all().delete()
    with pytest.raises(CommandError, match="Is a directory"):
        call_command("lessons", "import", str(tmp_path))
    with pytest.raises(CommandError, match="Is a directory"):
        call_command("lessons", "export", str(tmp_path), "--format", "jsonl")
    row = json.loads(path.read_text().splitlines()[0])
    for field, value in (("situation", "a\u0000b"), ("trigger", "t" * 51)):
        bad = tmp_path / f"bad-{field}.jsonl"
        bad.write_text(json.dumps({**row, "lesson": {**row["lesson"], field: value}}) + "\n")
        with pytest.raises(CommandError, match=r"bad-.*\.jsonl:1"):
            call_command("lessons", "import", str(bad))
    assert Lesson.objects.count() == 0 and lesson.pk
    index = tmp_path / "memory_index.json"
    index.write_text("[]")
    with pytest.raises(CommandError, match="is not a workspace slug"):
        call_command("lessons", "import", str(index), "--workspace", "Not A Slug")
    with pytest.raises(CommandError, match="at most 100 characters"):
        call_command("create_agent_token", "n" * 101)
    with pytest.raises(CommandError, match="at most 150 characters"):
        call_command("create_user", "u" * 151, "--role", "viewer")
    with pytest.raises(CommandError, match="username"):
        call_command("create_user", "bad name!", "--role", "viewer")
    with pytest.raises(CommandError, match="is not a workspace slug"):
        call_command("reflect_docs", "attach", "Bad_Slug", "--repo", str(tmp_path))


def test_it_imports_exports_and_reembeds_from_the_command_line(memory_index, tmp_path, capsys):
    call_command("lessons", "import", str(memory_index))
    assert "2 created" in capsys.readouterr().out
    call_command("lessons", "reembed")
    captured = capsys.readouterr()
    assert "embedded 2 lesson(s); 0 without a vector" in captured.out and "2/2 100%" in captured.err
    assert Lesson.objects.filter(embedding__isnull=True).count() == 0
    out = tmp_path / "dump.jsonl"
    call_command("lessons", "export", str(out))
    assert len(out.read_text().splitlines()) == 2
    with pytest.raises(CommandError, match="no such file"):
        call_command("lessons", "import", str(tmp_path / "missing.json"))


def test_export_writes_chatclis_tombstones_for_lessons_that_left(memory_index, time_machine):
    interchange.import_memory_index(memory_index)
    tombstones = memory_index.with_name("memory_tombstones.json")
    foreign_old = "f" * 24
    foreign_new = "e" * 24
    tombstones.write_text(
        json.dumps({foreign_old: "2000-01-01T00:00:00Z", foreign_new: interchange.format_time(timezone.now())})
    )
    archived = Lesson.objects.get(fact_id=fact_id(A))
    set_status(archived, LessonStatus.ARCHIVED, actor="user:bob")
    edited = Lesson.objects.get(fact_id=fact_id(B))
    edit_lesson(edited, correction="honour Retry-After", actor="user:bob")
    interchange.export_memory_index(memory_index)
    stones = json.loads(tombstones.read_text())
    assert fact_id(A) in stones  # archived here: a running chatcli must not bring it back
    assert fact_id(B) in stones  # the edit gave the lesson a new id; the old one is gone
    assert Lesson.objects.get(pk=edited.pk).fact_id not in stones
    assert foreign_new in stones and foreign_old not in stones  # chatcli's 30-day retention
    interchange.parse_time(stones[fact_id(A)])  # RFC3339Nano
    # Made active again: the tombstone goes at the next export.
    set_status(Lesson.objects.get(pk=archived.pk), LessonStatus.ACTIVE, actor="user:bob")
    interchange.export_memory_index(memory_index)
    assert fact_id(A) not in json.loads(tombstones.read_text())
    # Thirty days on, our own tombstones have aged out too.
    time_machine.move_to(timezone.now() + timedelta(days=31))
    interchange.export_memory_index(memory_index)
    assert fact_id(B) not in json.loads(tombstones.read_text())
