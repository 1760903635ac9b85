"""The one way lessons enter and change in the store: ``persist_lesson`` and the curation functions.

Callers: the queue (one DB transaction with the job's state), manual lessons, imports, approved proposals.
The dedup rules of chatcli (exact duplicate / near duplicate → reinforce; same-subject overlap →
supersede, docs/compat/chatcli.md#dedupe) live here; every change writes a ``LessonVersion`` so any of it can be undone.
Lessons whose embedded text changed are queued for the ``embed`` worker after the transaction commits.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings
from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Ln
from django.utils import timezone

from lessonboard.models import Workspace
from lessons import doc2query
from lessons.content import (
    MANUAL_MISTAKE,
    MANUAL_TAGS,
    REINFORCE_JACCARD,
    SUPERSEDE_JACCARD,
    fact_content,
    fact_id,
    jaccard,
    same_subject,
    significant_tokens,
)
from lessons.metrics import LESSONS_PERSISTED
from lessons.models import Lesson, LessonScope, LessonStatus, LessonVersion, VersionAction

log = logging.getLogger(__name__)

HALF_LIFE_DAYS = 30.0
# How many full-text candidates the near-duplicate test compares token by token.
NEAR_DUPLICATE_CANDIDATES = 200
# Words every lesson's content has (chatcli's line labels): useless for finding candidates.
_LABEL_TOKENS = frozenset({"lesson", "mistake", "correction", "trigger"})

Action = Literal["created", "reinforced", "superseded", "unchanged"]


@dataclass(frozen=True)
class PersistResult:
    lesson: Lesson
    action: Action
    # For "reinforced" by near duplicate and "superseded": the Jaccard similarity that decided it.
    similarity: float | None = None
    superseded: Lesson | None = None


def chatcli_score(access_count: int, days_since_access: float, confidence: float) -> float:
    """``(1 + ln(1 + access_count)) × 2^(−days/half_life) × (0.5 + confidence)`` (docs/compat/chatcli.md#memory-index)."""
    return (1 + math.log(1 + access_count)) * 2 ** (-days_since_access / HALF_LIFE_DAYS) * (0.5 + confidence)


def latest_version(lesson: Lesson) -> int | None:
    """The number of the lesson's newest version (None before its first)."""
    return lesson.versions.order_by("-number").values_list("number", flat=True).first()


def record_version(
    lesson: Lesson,
    action: str,
    *,
    actor: str,
    reason: str = "",
    user: Any = None,
    source_job_id: str | None = None,
    number: int | None = None,
) -> LessonVersion:
    """The lesson's next version; ``number``: when the caller knows it (1 for a lesson just created)."""
    if number is None:
        number = (latest_version(lesson) or 0) + 1
    return LessonVersion.objects.create(
        lesson=lesson,
        number=number,
        action=action,
        snapshot=lesson.snapshot(),
        actor=actor,
        actor_user=user if user is not None and getattr(user, "is_authenticated", False) else None,
        reason=reason,
        source_job_id=source_job_id or None,
    )


def schedule_embedding(lesson_ids: Iterable[int]) -> None:
    """Queue the ``embed`` task for these lessons once the current transaction commits.

    A broker that is down loses nothing: the lessons keep a NULL vector, which the periodic
    ``embed_missing`` sweep and ``manage.py lessons reembed`` fill in. The lessons' text changed (an
    edit, a restore, a merge, an import), so their "applies when" phrasings are written again when an
    LLM is configured (``lessons.doc2query``).
    """
    ids = sorted(set(lesson_ids))
    doc2query.schedule(ids)
    if not ids or settings.EMBEDDING_PROVIDER == "none":
        return

    def send() -> None:
        from lessons.tasks import embed_lessons

        try:
            embed_lessons.delay(ids, timezone.now().isoformat())
        except Exception:  # the broker being down must not fail the caller's committed work
            log.warning("lessons: could not queue embedding for %s; the sweep will pick them up", ids, exc_info=True)

    transaction.on_commit(send)


def schedule_new_embedding() -> None:
    """A new lesson (no vector yet): after the commit, queue an ``embed_new`` task (starting
    ``EMBED_NEW_DELAY`` later) unless one is queued and not started already — that one embeds this
    lesson too (``lessons.vectors.embed_new``), so a burst of new lessons costs a few tasks and full
    model batches instead of one task each. Meanwhile full text finds the lesson (retrieval's vector
    branch skips lessons without a vector)."""
    if settings.EMBEDDING_PROVIDER == "none":
        return

    def send() -> None:
        from lessons import vectors
        from lessons.tasks import embed_new

        if not vectors.arm_embed_new():
            return
        try:
            embed_new.apply_async(countdown=vectors.EMBED_NEW_DELAY)
        except Exception:  # the broker being down must not fail the caller's committed work
            vectors.disarm_embed_new()  # the next new lesson tries again; the sweep catches this one
            log.warning("lessons: could not queue embedding of new lessons; the sweep will", exc_info=True)

    transaction.on_commit(send)


def _reinforce(lesson: Lesson, confidence: float, *, now: Any) -> None:
    lesson.access_count += 1
    lesson.last_accessed = now
    lesson.confidence = min(1.0, max(lesson.confidence, confidence) + 0.05)
    lesson.score = chatcli_score(lesson.access_count, 0.0, lesson.confidence)
    lesson.updated_at = now
    lesson.save(update_fields=["access_count", "last_accessed", "confidence", "score", "updated_at"])


def _near_duplicate_candidates(tokens: list[str], workspace: Workspace | None) -> list[Lesson]:
    """Active lessons of the same workspace sharing words with ``tokens``, best full-text match first.

    chatcli compares with every fact; a table of a million lessons cannot, so PostgreSQL's full-text
    index picks the ``NEAR_DUPLICATE_CANDIDATES`` lessons sharing the most words (a lesson with
    Jaccard ≥ 0.5 shares at least half of the words, so it ranks near the top).
    """
    words = sorted({t for t in tokens if t not in _LABEL_TOKENS})
    if not words:
        return []
    query = SearchQuery(" | ".join(words), search_type="raw", config="english")
    return list(
        Lesson.objects.active()
        .filter(category="lesson", workspace=workspace, search_vector=query)
        .annotate(match=SearchRank(F("search_vector"), query))
        .order_by("-match", "-id")
        # what the dedup rules read: never the vectors and texts of NEAR_DUPLICATE_CANDIDATES lessons
        .only("id", "content", "confidence", "fact_id")[:NEAR_DUPLICATE_CANDIDATES]
    )


def persist_in_transaction(
    *,
    situation: str,
    mistake: str,
    correction: str,
    tags: list[str],
    trigger: str,
    workspace: Workspace | None = None,
    agent: str = "",
    source_job_id: str | None = None,
    confidence: float = 0.6,
    provenance: str = "extraction",
    actor: str = "system",
    user: Any = None,
    reason: str = "",
    dedupe: bool = True,
    lang: str = "",
) -> PersistResult:
    """Store a lesson, or reinforce/supersede the one it duplicates (chatcli's rules, docs/compat/chatcli.md#dedupe):

    - same fact id (normalised content) → reinforce it;
    - significant-token Jaccard ≥ 0.85 with an active lesson → reinforce that one;
    - 0.5 ≤ Jaccard < 0.85, same first two significant tokens, and confidence ≥ the old one's →
      the old lesson becomes ``superseded`` (restorable from its history) and the new one is created
      with provenance ``<provenance> (supersedes <old fact id>)``.

    Idempotent per ``source_job_id``: persisting the same job again returns the lesson its first run
    produced or reinforced, with action ``unchanged``. ``tags`` are stored as given (the caller builds
    chatcli's tag list, e.g. with ``lessons.content.lesson_tags``). Safe inside the caller's transaction.
    ``dedupe=False`` (imports that keep ids) skips the near-duplicate and supersede tests.
    ``lang`` ("" = detect from the text) picks the lesson's full-text configuration.

    This is ``persist_lesson`` without its own savepoint: for a caller whose transaction is rolled back
    as a whole on any error (the queue's success transaction); everyone else calls ``persist_lesson``.
    """
    if source_job_id:
        existing = _persisted_by(source_job_id)
        if existing is not None:
            LESSONS_PERSISTED.labels(action="unchanged").inc()
            return PersistResult(existing, "unchanged")
    content = fact_content(situation, mistake, correction, trigger)
    fid = fact_id(content)
    now = timezone.now()
    # Scoped like the near-duplicate test: another workspace's lesson with the same text is not ours to
    # reinforce (nor to name in the answer), and a workspace-less lesson is only the pool's.
    duplicate = (
        Lesson.objects.select_for_update()
        .filter(fact_id=fid, status=LessonStatus.ACTIVE, workspace=workspace)
        .order_by("-id")
        .first()
    )
    if duplicate is not None:
        _reinforce(duplicate, confidence, now=now)
        record_version(
            duplicate,
            VersionAction.REINFORCE,
            actor=actor,
            user=user,
            reason=reason or "exact duplicate",
            source_job_id=source_job_id,
        )
        LESSONS_PERSISTED.labels(action="reinforced").inc()
        return PersistResult(duplicate, "reinforced", similarity=1.0)

    superseded: Lesson | None = None
    similarity: float | None = None
    if dedupe:
        tokens = significant_tokens(content)
        scored = [
            (jaccard(tokens, significant_tokens(c.content)), c) for c in _near_duplicate_candidates(tokens, workspace)
        ]
        scored.sort(key=lambda pair: (-pair[0], -(pair[1].pk or 0)))
        near = next(((j, c) for j, c in scored if j >= REINFORCE_JACCARD), None)
        if near is not None:
            similarity, target = near
            target = Lesson.objects.select_for_update().get(pk=target.pk)
            _reinforce(target, confidence, now=now)
            record_version(
                target,
                VersionAction.REINFORCE,
                actor=actor,
                user=user,
                reason=reason or f"near duplicate (Jaccard {similarity:.3f}) of: {content}",
                source_job_id=source_job_id,
            )
            LESSONS_PERSISTED.labels(action="reinforced").inc()
            return PersistResult(target, "reinforced", similarity=similarity)
        subject = next(
            (
                (j, c)
                for j, c in scored
                if SUPERSEDE_JACCARD <= j < REINFORCE_JACCARD
                and same_subject(tokens, significant_tokens(c.content))
                and confidence >= c.confidence
            ),
            None,
        )
        if subject is not None:
            similarity, superseded = subject
            provenance = f"{provenance} (supersedes {superseded.fact_id})"

    lesson = Lesson.objects.create(
        situation=situation,
        mistake=mistake,
        correction=correction,
        tags=list(tags),
        trigger=trigger,
        content=content,
        fact_id=fid,
        confidence=confidence,
        provenance=provenance,
        access_count=1,
        last_accessed=now,
        score=chatcli_score(1, 0.0, confidence),
        workspace=workspace,
        agent=agent,
        source_job_id=source_job_id or None,
        created_at=now,
        updated_at=now,
        lang=lang,
    )
    if superseded is not None:
        record_version(
            lesson,
            VersionAction.CREATE,
            actor=actor,
            user=user,
            reason=reason or f"supersedes #{superseded.pk} (Jaccard {similarity:.3f}, same subject)",
        )
        superseded = Lesson.objects.select_for_update().get(pk=superseded.pk)
        superseded.status = LessonStatus.SUPERSEDED
        superseded.superseded_by = lesson
        superseded.updated_at = now
        superseded.save(update_fields=["status", "superseded_by", "updated_at"])
        record_version(
            superseded,
            VersionAction.SUPERSEDE,
            actor=actor,
            user=user,
            reason=f"superseded by #{lesson.pk} (Jaccard {similarity:.3f}, same subject)",
        )
        schedule_new_embedding()
        doc2query.schedule([lesson.pk])
        LESSONS_PERSISTED.labels(action="superseded").inc()
        return PersistResult(lesson, "superseded", similarity=similarity, superseded=superseded)
    record_version(lesson, VersionAction.CREATE, actor=actor, user=user, reason=reason, number=1)
    schedule_new_embedding()
    doc2query.schedule([lesson.pk])
    LESSONS_PERSISTED.labels(action="created").inc()
    return PersistResult(lesson, "created")


persist_lesson = transaction.atomic(persist_in_transaction)


# The lesson a job's earlier run created, else the one it reinforced (its version names the job): one
# statement, each branch on its own index, that reads ids only (on the queue's path it finds none).
# Only a lesson still in use counts: a job that runs again because its lesson was archived learns anew
# (docs/queue.md#repeated-failures).
PERSISTED_BY_SQL = """
SELECT id, 0 AS via FROM lessons_lesson WHERE source_job_id = %(job)s AND status = 'active'
UNION ALL
SELECT v.lesson_id, 1 FROM lessons_lessonversion v JOIN lessons_lesson l ON l.id = v.lesson_id
WHERE v.source_job_id = %(job)s AND l.status = 'active'
ORDER BY via LIMIT 1
"""


def _persisted_by(source_job_id: str) -> Lesson | None:
    with connection.cursor() as cursor:
        cursor.execute(PERSISTED_BY_SQL, {"job": source_job_id})
        row = cursor.fetchone()
    return Lesson.objects.get(pk=row[0]) if row else None


def persist_manual(
    text: str,
    *,
    locale: str = "en",
    workspace: Workspace | None = None,
    agent: str = "",
    actor: str = "system",
    user: Any = None,
) -> PersistResult:
    """chatcli's ``/reflect <text>`` (docs/compat/chatcli.md#reflect-free-text): situation = correction = the text, a localised
    mistake line, trigger ``manual``, tags ``reflexion, trigger:manual, user-supplied``."""
    return persist_lesson(
        situation=text,
        mistake=MANUAL_MISTAKE.get(locale, MANUAL_MISTAKE["en"]),
        correction=text,
        tags=list(MANUAL_TAGS),
        trigger="manual",
        workspace=workspace,
        agent=agent,
        provenance="manual",
        actor=actor,
        user=user,
        reason="manual lesson",
    )


# --- curation: every change is a version --------------------------------------------------------------
class LessonStateError(ValueError):
    """The change does not apply to the lesson as it stands: a deleted lesson (a tombstone) is restored
    before it is edited or shared, and archiving is for an active or superseded lesson. The API answers
    409, the pages an error message; the check runs under the row lock, so it holds against a race."""


# Which statuses each status may be reached from (set_status).
ALLOWED_FROM: dict[str, tuple[str, ...]] = {
    LessonStatus.ARCHIVED: (LessonStatus.ACTIVE, LessonStatus.SUPERSEDED),
    LessonStatus.DELETED: (LessonStatus.ACTIVE, LessonStatus.ARCHIVED, LessonStatus.SUPERSEDED),
    LessonStatus.ACTIVE: (LessonStatus.ARCHIVED, LessonStatus.SUPERSEDED, LessonStatus.DELETED),
}


def _not_deleted(lesson: Lesson, doing: str) -> None:
    if lesson.status == LessonStatus.DELETED:
        raise LessonStateError(f"lesson {lesson.pk} is deleted: restore it before {doing} it")


def _apply_fields(lesson: Lesson, fields: dict[str, Any]) -> bool:
    """Set the text fields and recompute content/fact id; True when the embedded text changed."""
    before = lesson.embedding_text()
    for name in ("situation", "mistake", "correction", "trigger", "confidence", "provenance"):
        if name in fields and fields[name] is not None:
            setattr(lesson, name, fields[name])
    if "tags" in fields and fields["tags"] is not None:
        lesson.tags = list(fields["tags"])
    lesson.content = fact_content(lesson.situation, lesson.mistake, lesson.correction, lesson.trigger)
    lesson.fact_id = fact_id(lesson.content)
    changed = lesson.embedding_text() != before
    if fields.get("lang") is not None:
        lesson.lang = fields["lang"]  # "" = detect again on save
    elif changed:
        lesson.lang = ""  # new words without a named language: detected again on save
    return changed


@transaction.atomic
def edit_lesson(
    lesson: Lesson,
    *,
    situation: str | None = None,
    mistake: str | None = None,
    correction: str | None = None,
    tags: list[str] | None = None,
    trigger: str | None = None,
    confidence: float | None = None,
    actor: str,
    user: Any = None,
    reason: str = "",
    lang: str | None = None,
) -> Lesson:
    """The lesson with the given fields changed, as a new version; nothing is written (no version) when
    every given value is what the lesson already has. A deleted lesson raises ``LessonStateError``."""
    lesson = Lesson.objects.select_for_update().get(pk=lesson.pk)
    _not_deleted(lesson, "changing")
    before = lesson.snapshot()
    changed = _apply_fields(
        lesson,
        {
            "situation": situation,
            "mistake": mistake,
            "correction": correction,
            "tags": tags,
            "trigger": trigger,
            "confidence": confidence,
            "lang": lang,
        },
    )
    if lesson.snapshot() == before:
        return Lesson.objects.get(pk=lesson.pk)  # as stored: nothing to record
    lesson.updated_at = timezone.now()
    lesson.save()
    record_version(lesson, VersionAction.EDIT, actor=actor, user=user, reason=reason)
    if changed:
        schedule_embedding([lesson.pk])
    return lesson


_STATUS_ACTIONS = {
    LessonStatus.ARCHIVED: VersionAction.ARCHIVE,
    LessonStatus.DELETED: VersionAction.DELETE,
    LessonStatus.ACTIVE: VersionAction.RESTORE,
}


@transaction.atomic
def set_status(lesson: Lesson, status: str, *, actor: str, user: Any = None, reason: str = "") -> Lesson:
    """Archive (``archived``), delete (``deleted``: a tombstone, docs/lessons.md#memory-api) or bring back
    (``active``) a lesson: a new version each time. A change ``ALLOWED_FROM`` does not list raises
    ``LessonStateError`` (a lesson already in ``status`` too: there is nothing to record)."""
    lesson = Lesson.objects.select_for_update().get(pk=lesson.pk)
    if lesson.status not in ALLOWED_FROM[LessonStatus(status)]:
        raise LessonStateError(f"lesson {lesson.pk} is {lesson.status}; it cannot become {status}")
    lesson.status = status
    if status == LessonStatus.ACTIVE:
        lesson.superseded_by = None
    lesson.updated_at = timezone.now()
    lesson.save(update_fields=["status", "superseded_by", "updated_at"])
    record_version(lesson, _STATUS_ACTIONS[LessonStatus(status)], actor=actor, user=user, reason=reason)
    return lesson


@transaction.atomic
def set_scope(lesson: Lesson, scope: str, *, actor: str, user: Any = None, reason: str = "") -> Lesson:
    """Promote a lesson to the shared tier (``shared``: served to every workspace) or take it back to its
    workspace's (``workspace``): a new version (docs/lessons.md#scopes). A deleted lesson raises
    ``LessonStateError``: sharing a tombstone would show it to every workspace."""
    lesson = Lesson.objects.select_for_update().get(pk=lesson.pk)
    _not_deleted(lesson, "sharing or unsharing")
    lesson.scope = scope
    lesson.updated_at = timezone.now()
    lesson.save(update_fields=["scope", "updated_at"])
    action = VersionAction.SHARE if scope == LessonScope.SHARED else VersionAction.UNSHARE
    record_version(lesson, action, actor=actor, user=user, reason=reason)
    return lesson


@transaction.atomic
def restore_version(lesson: Lesson, number: int, *, actor: str, user: Any = None, reason: str = "") -> Lesson:
    """Make the lesson what version ``number`` recorded (text, tags, confidence, status) — a new version.

    Restoring a superseded lesson to an active version clears ``superseded_by``; the lesson that
    superseded it stays as it is (archive it separately if it was wrong).
    """
    lesson = Lesson.objects.select_for_update().get(pk=lesson.pk)
    version = lesson.versions.get(number=number)
    snap = version.snapshot
    changed = _apply_fields(lesson, snap)
    lesson.status = snap.get("status", lesson.status)
    if lesson.status == LessonStatus.ACTIVE:
        lesson.superseded_by = None
    lesson.updated_at = timezone.now()
    lesson.save()
    record_version(lesson, VersionAction.RESTORE, actor=actor, user=user, reason=reason or f"restored version {number}")
    if changed:
        schedule_embedding([lesson.pk])
    return lesson


@transaction.atomic
def merge_lessons(
    keep: Lesson,
    other: Lesson,
    *,
    situation: str | None = None,
    mistake: str | None = None,
    correction: str | None = None,
    tags: list[str] | None = None,
    actor: str,
    user: Any = None,
    reason: str = "",
) -> Lesson:
    """Fold ``other`` into ``keep``: tags united, access counts added, highest confidence kept, the text
    as given (or ``keep``'s); ``other`` becomes ``archived`` with ``superseded_by = keep``. Both get a
    ``merge`` version, so either can be restored."""
    if keep.pk == other.pk:
        raise ValueError("cannot merge a lesson with itself")
    keep = Lesson.objects.select_for_update().get(pk=keep.pk)
    other = Lesson.objects.select_for_update().get(pk=other.pk)
    _not_deleted(keep, "merging into")
    _not_deleted(other, "merging")
    merged_tags = tags if tags is not None else [*keep.tags, *(t for t in other.tags if t not in keep.tags)]
    _apply_fields(
        keep,
        {
            "situation": situation,
            "mistake": mistake,
            "correction": correction,
            "tags": merged_tags,
            "confidence": max(keep.confidence, other.confidence),
        },
    )
    now = timezone.now()
    keep.access_count += other.access_count
    keep.last_accessed = max(keep.last_accessed, other.last_accessed)
    keep.score = chatcli_score(keep.access_count, 0.0, keep.confidence)
    keep.updated_at = now
    keep.save()
    record_version(keep, VersionAction.MERGE, actor=actor, user=user, reason=reason or f"merged #{other.pk} into this")
    other.status = LessonStatus.ARCHIVED
    other.superseded_by = keep
    other.updated_at = now
    other.save(update_fields=["status", "superseded_by", "updated_at"])
    record_version(other, VersionAction.MERGE, actor=actor, user=user, reason=reason or f"merged into #{keep.pk}")
    schedule_embedding([keep.pk])
    return keep


def record_use(lesson_ids: Iterable[int]) -> None:
    """Reinforce by use (a retrieval returned them): access_count + 1, last_accessed = now, score."""
    ids = list(lesson_ids)
    if not ids:
        return
    # One statement, one new row version per lesson: ``chatcli_score(access_count + 1, 0, confidence)`` in
    # SQL (the right-hand sides read the row before the update). None of these columns is indexed, so on a
    # page with room (fillfactor, lessons migration 0011) it is a HOT update that touches no index.
    Lesson.objects.filter(pk__in=sorted(set(ids))).update(
        access_count=F("access_count") + 1,
        last_accessed=timezone.now(),
        score=(Ln(F("access_count") + 2.0) + 1.0) * (F("confidence") + 0.5),
    )


@dataclass(frozen=True)
class ImportedFact:
    """A chatcli ``lesson`` fact as read from ``memory_index.json`` (or a lesson from a JSONL export)."""

    fact_id: str
    content: str
    situation: str
    mistake: str
    correction: str
    trigger: str
    tags: list[str]
    created_at: Any
    last_accessed: Any
    access_count: int
    score: float
    confidence: float
    provenance: str
    extra: dict[str, Any]


@transaction.atomic
def import_fact(
    fact: ImportedFact, *, workspace: Workspace | None = None, actor: str = "import", user: Any = None
) -> PersistResult:
    """Bring a lesson in from outside keeping its id (fact id), content and access stats.

    A lesson with the same fact id already here takes the higher access count, the later access and
    the higher confidence (chatcli's merge of on-disk state, docs/compat/chatcli.md#memory-index) — ``unchanged`` if nothing
    moved. Near-duplicate and supersede tests do not run: an import keeps what the file says.
    """
    same = Lesson.objects.select_for_update().filter(fact_id=fact.fact_id, workspace=workspace).order_by("-id")
    existing = same.filter(status=LessonStatus.ACTIVE).first() or same.first()
    if existing is not None:
        changed = False
        if fact.access_count > existing.access_count:
            existing.access_count, changed = fact.access_count, True
        if fact.last_accessed > existing.last_accessed:
            existing.last_accessed, changed = fact.last_accessed, True
        if fact.confidence > existing.confidence:
            existing.confidence, changed = fact.confidence, True
        if not changed:
            return PersistResult(existing, "unchanged")
        existing.score = max(existing.score, fact.score)
        existing.updated_at = timezone.now()
        existing.save()
        record_version(existing, VersionAction.REINFORCE, actor=actor, user=user, reason="import: newer access data")
        return PersistResult(existing, "reinforced")
    lesson = Lesson.objects.create(
        situation=fact.situation,
        mistake=fact.mistake,
        correction=fact.correction,
        tags=list(fact.tags),
        trigger=fact.trigger,
        content=fact.content,
        fact_id=fact.fact_id,
        confidence=fact.confidence,
        provenance=fact.provenance,
        access_count=fact.access_count,
        last_accessed=fact.last_accessed,
        score=fact.score,
        workspace=workspace,
        created_at=fact.created_at,
        updated_at=timezone.now(),
        chatcli_extra=dict(fact.extra),
    )
    record_version(lesson, VersionAction.CREATE, actor=actor, user=user, reason="imported")
    schedule_embedding([lesson.pk])
    return PersistResult(lesson, "created")
