"""Moving lessons in and out: chatcli's ``memory_index.json`` (docs/compat/chatcli.md#memory-index) both ways, and a JSONL dump of
lessons with their full history.

memory_index.json: lesson facts come in keeping their id, content, timestamps and access stats; other
facts are left alone on import and preserved on export (export rewrites the lesson facts of the target
file and keeps everything else). The file is written like chatcli writes it — a JSON array of facts,
2-space indent, no trailing newline, sorted by score descending, via a temp file and a rename (we
also fsync) — so importing a file and exporting onto it gives back the same bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from django.db import DataError, IntegrityError, transaction
from django.utils import timezone as dj_timezone
from django.utils.dateparse import parse_datetime

from lessonboard import files
from lessonboard.inputs import storable, storable_document
from lessonboard.models import Workspace
from lessons.content import one_line
from lessons.language import clean_code
from lessons.models import Lesson, LessonScope, LessonStatus, LessonVersion
from lessons.rendering import lesson_json
from lessons.store import ImportedFact, import_fact, schedule_embedding

MAX_ACCESS_COUNT = 2**31 - 1  # the column is a PostgreSQL integer
FACT_KEYS = (
    "id",
    "content",
    "category",
    "tags",
    "created_at",
    "last_accessed",
    "access_count",
    "score",
    "source",
    "source_project",
    "confidence",
    "provenance",
)
_OMIT_EMPTY = {"tags", "source", "source_project", "provenance"}
_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$")
_LINE = re.compile(r"^(LESSON|MISTAKE|CORRECTION|TRIGGER): ?(.*)$")


class InterchangeError(Exception):
    """A file that cannot be read as the format it claims to be; the message says where."""


@dataclass
class ImportReport:
    created: int = 0
    reinforced: int = 0
    unchanged: int = 0
    skipped_other_facts: int = 0
    errors: list[str] = field(default_factory=list)


# --- chatcli's timestamps ------------------------------------------------------------------------------
def parse_time(raw: str) -> datetime:
    """RFC 3339 with up to nanoseconds (Go's RFC3339Nano); Python keeps microseconds."""
    match = _RFC3339.match(raw)
    if not match:
        raise ValueError(f"not an RFC 3339 time: {raw!r}")
    year, month, day, hour, minute, second, frac, zone = match.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    if zone in ("Z", "z"):
        tz = UTC
    else:
        sign = 1 if zone[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=tz)


def format_time(value: datetime) -> str:
    """Go's ``time.RFC3339Nano`` in the machine's local zone: fraction without trailing zeros, ``Z`` for UTC."""
    local = value.astimezone()
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    if local.microsecond:
        text += "." + f"{local.microsecond:06d}".rstrip("0")
    offset = local.utcoffset() or timedelta(0)
    if offset == timedelta(0):
        return text + "Z"
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    minutes = abs(minutes)
    return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _time_field(lesson_value: datetime, raw: str | None) -> str:
    """The original string when the value is unchanged (keeps nanoseconds and the zone), else a new one."""
    if raw:
        try:
            if parse_time(raw) == lesson_value:
                return raw
        except ValueError:
            pass
    return format_time(lesson_value)


def _number(value: float) -> float | int:
    # Go's encoding/json writes 1.0 as 1.
    return int(value) if float(value).is_integer() else float(value)


# --- memory_index.json → lessons ---------------------------------------------------------------------
def parse_lesson_content(content: str) -> tuple[str, str, str, str]:
    """Split chatcli's four-line content into (situation, mistake, correction, trigger); a content that is
    not in that shape becomes the situation and the correction."""
    fields: dict[str, str] = {}
    for line in content.split("\n"):
        match = _LINE.match(line)
        if match:
            fields[match.group(1)] = match.group(2)
    if "LESSON" not in fields:
        text = one_line(content)
        return text, "", text, ""
    return fields.get("LESSON", ""), fields.get("MISTAKE", ""), fields.get("CORRECTION", ""), fields.get("TRIGGER", "")


def _fact_to_import(fact: dict[str, Any], where: str) -> ImportedFact:
    try:
        fact_id = fact["id"]
        content = fact["content"]
        if not isinstance(fact_id, str) or not re.fullmatch(r"[0-9a-f]{24}", fact_id):
            raise InterchangeError(f"{where}: 'id' must be 24 lowercase hex characters")
        if not isinstance(content, str) or not content.strip():
            raise InterchangeError(f"{where}: 'content' must be a non-empty string")
        situation, mistake, correction, trigger = parse_lesson_content(content)
        tags = fact.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise InterchangeError(f"{where}: 'tags' must be a list of strings")
        created_raw, accessed_raw = fact["created_at"], fact["last_accessed"]
        extra = {k: v for k, v in fact.items() if k not in FACT_KEYS or k in ("source", "source_project")}
        extra["_created_at"] = created_raw
        extra["_last_accessed"] = accessed_raw
        extra["_keys"] = list(fact.keys())
        access_count = int(fact.get("access_count", 1))
        if not 0 <= access_count <= MAX_ACCESS_COUNT:
            raise InterchangeError(f"{where}: 'access_count' must be between 0 and {MAX_ACCESS_COUNT}")
        # chatcli's text may hold NUL or lone surrogates, which PostgreSQL cannot store: they become U+FFFD
        # (docs/api.md#input-policy). Only such a fact exports differently from how it came in.
        return ImportedFact(
            fact_id=fact_id,
            content=storable(content),
            situation=storable(situation),
            mistake=storable(mistake),
            correction=storable(correction),
            trigger=storable(trigger),
            tags=[storable(t) for t in tags],
            created_at=parse_time(created_raw),
            last_accessed=parse_time(accessed_raw),
            access_count=access_count,
            score=float(fact.get("score", 0.0)),
            confidence=float(fact.get("confidence", 0.0)),
            provenance=storable(str(fact.get("provenance", ""))),
            extra=storable_document(extra),
        )
    except KeyError as exc:
        raise InterchangeError(f"{where}: missing key {exc.args[0]!r}") from exc
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise InterchangeError(f"{where}: {exc}") from exc


def read_memory_index(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InterchangeError(f"{path}: no such file") from exc
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InterchangeError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise InterchangeError(f"{path}: expected a JSON array of fact objects")
    return data


def import_memory_index(path: Path, *, workspace: Workspace | None = None, actor: str = "import") -> ImportReport:
    """Import the ``lesson`` facts of a chatcli memory_index.json (all or nothing)."""
    facts = read_memory_index(path)
    report = ImportReport()
    parsed = []
    for n, fact in enumerate(facts):
        if fact.get("category") != "lesson":
            report.skipped_other_facts += 1
            continue
        parsed.append(_fact_to_import(fact, f"{path.name}[{n}]"))
    with transaction.atomic():
        for item in parsed:
            result = import_fact(item, workspace=workspace, actor=actor)
            setattr(report, result.action, getattr(report, result.action) + 1)
    return report


# --- lessons → memory_index.json ---------------------------------------------------------------------
def lesson_fact(lesson: Lesson) -> dict[str, Any]:
    """A lesson as a chatcli fact, keys in chatcli's order, empty optional keys omitted."""
    extra = lesson.chatcli_extra or {}
    values: dict[str, Any] = {
        "id": lesson.fact_id,
        "content": lesson.content,
        "category": lesson.category,
        "tags": list(lesson.tags),
        "created_at": _time_field(lesson.created_at, extra.get("_created_at")),
        "last_accessed": _time_field(lesson.last_accessed, extra.get("_last_accessed")),
        "access_count": lesson.access_count,
        "score": _number(lesson.score),
        "source": extra.get("source", ""),
        "source_project": extra.get("source_project", ""),
        "confidence": _number(lesson.confidence),
        "provenance": lesson.provenance,
    }
    fact: dict[str, Any] = {}
    for key in FACT_KEYS:
        value = values[key]
        if key in _OMIT_EMPTY and not value:
            continue
        if key == "confidence" and not value:
            continue
        fact[key] = value
    for key, value in extra.items():  # keys chatcli may add later: kept, after the known ones
        if not key.startswith("_") and key not in FACT_KEYS:
            fact[key] = value
    original = extra.get("_keys")
    if original and set(original) == set(fact):
        fact = {key: fact[key] for key in original}
    return fact


def write_atomic(path: Path, text: str) -> None:
    """chatcli's memory files: UTF-8, mode 0600, replaced atomically (and, unlike chatcli, fsynced)."""
    files.write_atomic(path, text.encode("utf-8"), mode=0o600)


def export_memory_index(path: Path, lessons: Iterable[Lesson] | None = None) -> int:
    """Write the active lessons as lesson facts into ``path``, keeping its other facts (and lesson facts
    this board has never seen). Returns the number of lesson facts written from the board."""
    existing = read_memory_index(path) if path.exists() else []
    ours = list(lessons if lessons is not None else Lesson.objects.active().order_by("-score", "id"))
    known_ids = set(Lesson.objects.values_list("fact_id", flat=True))
    board = {lesson.fact_id: lesson_fact(lesson) for lesson in ours}
    facts: list[dict[str, Any]] = []
    for fact in existing:  # file order first, so equal scores keep their order (a stable sort below)
        fid = fact.get("id")
        if fact.get("category") != "lesson":
            facts.append(fact)
        elif fid in board:
            facts.append(board.pop(fid))
        elif fid not in known_ids:
            facts.append(fact)  # someone else's lesson: not ours to drop
    facts.extend(board.values())
    facts.sort(key=lambda fact: -float(fact.get("score", 0) or 0))
    write_atomic(path, json.dumps(facts, indent=2, ensure_ascii=False))
    export_tombstones(path.with_name(TOMBSTONES_NAME), active_ids={lesson.fact_id for lesson in ours})
    return len(ours)


TOMBSTONES_NAME = "memory_tombstones.json"
TOMBSTONE_RETENTION = timedelta(days=30)  # chatcli prunes its tombstones after 30 days


def export_tombstones(path: Path, *, active_ids: set[str], now: datetime | None = None) -> int:
    """chatcli's tombstones sidecar (``memory_tombstones.json``: fact id → RFC3339Nano time of removal),
    so that a running chatcli, which merges the file with what it holds in memory before each write,
    does not bring back lessons archived or superseded here (docs/compat/chatcli.md#memory-index).

    Every board lesson that left the active set in the last 30 days is tombstoned at the time it changed;
    the file's other tombstones are kept while they are younger than 30 days. Returns the number written."""
    now = now or dj_timezone.now()
    horizon = now - TOMBSTONE_RETENTION
    stones: dict[str, str] = {}
    if path.exists():
        try:
            existing = json.loads(path.read_text(encoding="utf-8") or "{}")
        except ValueError as exc:
            raise InterchangeError(f"{path}: not a JSON object of tombstones ({exc})") from exc
        if not isinstance(existing, dict):
            raise InterchangeError(f"{path}: not a JSON object of tombstones")
        for fact_id, when in existing.items():
            try:
                if isinstance(when, str) and parse_time(when) >= horizon:
                    stones[str(fact_id)] = when
            except ValueError:
                continue
    gone = (
        Lesson.objects.exclude(status=LessonStatus.ACTIVE)
        .filter(updated_at__gte=horizon)
        .exclude(fact_id__in=active_ids)
        .values_list("fact_id", "updated_at")
    )
    for fact_id, changed in gone:
        stones[fact_id] = format_time(changed)
    # An edit changes a lesson's content and so its fact id: the old id is gone from the board too.
    for snapshot, changed in LessonVersion.objects.filter(created_at__gte=horizon).values_list(
        "snapshot", "created_at"
    ):
        old = snapshot.get("fact_id") if isinstance(snapshot, dict) else None
        if old and old not in active_ids and old not in stones:
            stones[old] = format_time(changed)
    current = set(Lesson.objects.filter(status=LessonStatus.ACTIVE).values_list("fact_id", flat=True))
    for fact_id in current & set(stones):
        stones.pop(fact_id)  # an active lesson still says this: not removed
    for fact_id in active_ids:
        stones.pop(fact_id, None)  # back in use: no longer removed
    write_atomic(path, json.dumps(dict(sorted(stones.items())), indent=2, ensure_ascii=False))
    return len(stones)


# --- JSONL with history ------------------------------------------------------------------------------
def export_jsonl(path: Path, lessons: Iterable[Lesson] | None = None) -> int:
    """One line per lesson (any status): the lesson and every version of it."""
    rows = lessons if lessons is not None else Lesson.objects.select_related("workspace").order_by("id")
    lines = []
    for lesson in rows:
        versions = [
            {
                "number": v.number,
                "action": v.action,
                "snapshot": v.snapshot,
                "actor": v.actor,
                "reason": v.reason,
                "source_job_id": v.source_job_id,
                "created_at": v.created_at.isoformat(),
            }
            for v in lesson.versions.order_by("number")
        ]
        lines.append(json.dumps({"lesson": _lesson_record(lesson), "versions": versions}, ensure_ascii=False))
    write_atomic(path, "".join(line + "\n" for line in lines))
    return len(lines)


def _lesson_record(lesson: Lesson) -> dict[str, Any]:
    """The API's lesson JSON without the database id (ids do not travel), plus chatcli's extra keys."""
    record = lesson_json(lesson)
    del record["id"]
    return {**record, "chatcli_extra": lesson.chatcli_extra}


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InterchangeError(f"{path}: no such file") from exc
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise InterchangeError(f"{path}:{n}: not valid JSON: {exc}") from exc
        if not isinstance(row, dict) or not isinstance(row.get("lesson"), dict):
            raise InterchangeError(f"{path}:{n}: expected an object with a 'lesson' object")
        yield n, row


def _when(value: Any, where: str) -> datetime:
    parsed = parse_datetime(value) if isinstance(value, str) else None
    if parsed is None:
        raise InterchangeError(f"{where}: not a date-time: {value!r}")
    return parsed


def _lang(value: Any, where: str) -> str:
    if value is None:
        return ""
    try:
        return clean_code(str(value))
    except ValueError as exc:
        raise InterchangeError(f"{where}: 'lang': {exc}") from exc


def import_jsonl(path: Path, *, actor: str = "import") -> ImportReport:
    """Recreate lessons with their history. A lesson already here (same fact id and creation time) is
    left as it is, so importing the same file twice changes nothing."""
    report = ImportReport()
    rows = list(_jsonl_rows(path))
    created: list[int] = []
    with transaction.atomic():
        for n, row in rows:
            where = f"{path.name}:{n}"
            data = row["lesson"]
            try:
                created_at = _when(data["created_at"], where)
                if Lesson.objects.filter(fact_id=data["fact_id"], created_at=created_at).exists():
                    report.unchanged += 1
                    continue
                status = data.get("status", LessonStatus.ACTIVE)
                if status not in LessonStatus.values:
                    raise InterchangeError(f"{where}: unknown status {status!r}")
                scope = data.get("scope", LessonScope.WORKSPACE)
                if scope not in LessonScope.values:
                    raise InterchangeError(f"{where}: unknown scope {scope!r}")
                slug = data.get("workspace")
                lesson = Lesson.objects.create(
                    situation=data["situation"],
                    mistake=data.get("mistake", ""),
                    correction=data["correction"],
                    tags=list(data.get("tags", [])),
                    trigger=data.get("trigger", ""),
                    content=data["content"],
                    fact_id=data["fact_id"],
                    category=data.get("category", "lesson"),
                    confidence=float(data.get("confidence", 0.6)),
                    provenance=data.get("provenance", ""),
                    access_count=int(data.get("access_count", 1)),
                    last_accessed=_when(data["last_accessed"], where),
                    score=float(data.get("score", 0.0)),
                    status=status,
                    scope=scope,
                    workspace=Workspace.objects.for_slug(slug) if slug else None,
                    agent=data.get("agent", ""),
                    source_job_id=data.get("source_job_id") or None,
                    created_at=created_at,
                    updated_at=_when(data.get("updated_at", data["created_at"]), where),
                    chatcli_extra=data.get("chatcli_extra") or {},
                    lang=_lang(data.get("lang"), where),  # "" = detected on save
                )
                for version in row.get("versions", []):
                    LessonVersion.objects.create(
                        lesson=lesson,
                        number=int(version["number"]),
                        action=version["action"],
                        snapshot=version["snapshot"],
                        actor=version.get("actor", actor),
                        reason=version.get("reason", ""),
                        source_job_id=version.get("source_job_id"),
                        created_at=_when(version["created_at"], where),
                    )
            except KeyError as exc:
                raise InterchangeError(f"{where}: missing key {exc.args[0]!r}") from exc
            except IntegrityError as exc:
                raise InterchangeError(f"{where}: clashes with a lesson already here: {exc}") from exc
            except (TypeError, ValueError, DataError) as exc:  # DataError: a NUL, a value too long for its column
                raise InterchangeError(f"{where}: {str(exc).splitlines()[0]}") from exc
            report.created += 1
            created.append(lesson.pk)
        schedule_embedding(created)
    return report


# --- LESSONS.md ---------------------------------------------------------------------------------------
LESSONS_MD_HEADER = "# Lessons learned\n\nAuto-generated from agent reflexion. Newest entries appended at the end.\n"


def lessons_md(lessons: Iterable[Lesson]) -> str:
    """chatcli's ``LESSONS.md`` (docs/compat/chatcli.md#lessons-md) for these lessons, oldest first: the
    title and note, then per lesson a blank line, ``## <created, RFC 3339 seconds> — trigger: <t>`` and the
    bullets that are not empty. chatcli appends an entry only for a generated lesson that was new."""
    out = [LESSONS_MD_HEADER]
    for lesson in lessons:
        created = lesson.created_at.astimezone().replace(microsecond=0).isoformat()
        out.append(f"\n## {created.replace('+00:00', 'Z')} \u2014 trigger: {lesson.trigger or 'manual'}\n")
        for label, value in (
            ("Situation", lesson.situation),
            ("Mistake", lesson.mistake),
            ("Correction", lesson.correction),
            ("Tags", ", ".join(t for t in lesson.tags if t != "reflexion" and not t.startswith("trigger:"))),
        ):
            if value:
                out.append(f"- **{label}:** {value}\n")
    return "".join(out)


def generated_lessons() -> Any:
    """The lessons chatcli would have mirrored into LESSONS.md: made by a lesson job (not by hand)."""
    return Lesson.objects.filter(source_job_id__isnull=False).order_by("created_at", "id")


def export_lessons_md(path: Path, lessons: Iterable[Lesson] | None = None) -> int:
    rows = list(lessons if lessons is not None else generated_lessons())
    write_atomic(path, lessons_md(rows))
    return len(rows)
