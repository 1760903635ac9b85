"""DLQ triage: the queue page's tabs, filters, keyset pages and cached counts; error groups; the
eligibility preview of a bulk action; "seen this before?"; the WAL record behind a job.

Everything here reads; the actions are ``lessonq.dlq`` (one job) and ``lessonq.bulk`` (many).
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.postgres.search import TrigramSimilarity
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, Max, Q, QuerySet
from django.db.models.functions import Left
from django.db.models.lookups import IContains
from django.utils import timezone

from lessonboard.models import AuditEvent
from lessonq.jobid import is_job_id
from lessonq.models import Job, JobQuerySet, JobState
from lessonq.paths import base, dlq, expired_dir, wal
from lessonq.wal import WalError

# --- tabs ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tab:
    slug: str
    label: str
    states: tuple[str, ...]
    recent: bool = False  # only jobs finished within LESSONQ_DONE_WINDOW


TABS: dict[str, Tab] = {
    t.slug: t
    for t in (
        Tab("pending", "Pending", (JobState.PENDING, JobState.RUNNING)),
        Tab("retrying", "Retrying", (JobState.RETRY_WAIT,)),
        Tab("dead", "Dead", (JobState.DEAD,)),
        Tab("done", "Done (recent)", (JobState.SUCCEEDED, JobState.SKIPPED, JobState.PURGED), recent=True),
        Tab("expired", "Expired", (JobState.EXPIRED,)),
    )
}
DEFAULT_TAB = "dead"


def tab_jobs(tab: Tab, *, now: datetime | None = None) -> JobQuerySet:
    qs = Job.objects.filter(state__in=tab.states)
    if tab.recent:
        qs = qs.filter(finished_at__gte=(now or timezone.now()) - timedelta(seconds=settings.LESSONQ_DONE_WINDOW))
    return qs


# --- filters (kept in the URL by the page's form) --------------------------------------------------------

AGES: dict[str, timedelta] = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
SORTS = {"newest": "newest first", "oldest": "oldest first", "attempts": "most attempts"}


@dataclass(frozen=True)
class JobFilter:
    """The page's filter; ``as_dict`` is what goes into the URL and the audit log."""

    tab: str = DEFAULT_TAB
    trigger: str = ""
    agent: str = ""
    workspace: str = ""
    group: str = ""
    newer: str = ""  # enqueued within this age (AGES key)
    older: str = ""  # enqueued before this age
    died: str = ""  # finished (died) within this age: what the error groups' windows count
    q: str = ""
    sort: str = "newest"

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in self.__dict__.items() if v and not (k == "sort" and v == "newest")}

    @property
    def narrowed(self) -> bool:
        return any(k not in ("tab", "sort") for k in self.as_dict())

    def apply(self, *, now: datetime | None = None) -> JobQuerySet:
        now = now or timezone.now()
        qs = tab_jobs(TABS[self.tab], now=now)
        if self.trigger:
            qs = qs.filter(trigger=self.trigger)
        if self.agent:
            qs = qs.filter(agent=self.agent)
        if self.workspace:
            qs = qs.filter(workspace__slug=self.workspace)
        if self.group:
            qs = qs.filter(fingerprint=self.group)
        if self.newer in AGES:
            qs = qs.filter(enqueued_at__gte=now - AGES[self.newer])
        if self.older in AGES:
            qs = qs.filter(enqueued_at__lt=now - AGES[self.older])
        if self.died in AGES:
            qs = qs.filter(finished_at__gte=now - AGES[self.died])
        if self.q:
            qs = qs.filter(Q(pk=self.q.strip().lower()) if search_refusal(self.tab, self.q) else text_search(self.q))
        return qs


# Text search reads a bounded excerpt of each payload: the first SEARCH_EXCERPT_CHARS characters of the
# task and of the last error, which the trigram GIN indexes of migration 0009_search_excerpts hold for
# every finished state (the Dead, Done and Expired tabs, where rows pile up). A 15 MiB payload is never
# searched by substring. The active tabs (Pending, Retrying) are a working set with no such index: their
# search reads the excerpts of the tab's rows, and is refused while the tab holds more than
# LESSONQ_EXACT_COUNT_LIMIT jobs. Fewer than SEARCH_MIN_CHARS characters give a trigram index nothing
# to look up (every row would be read), so such a query matches job ids only, and the page says why.
SEARCH_EXCERPT_CHARS = 2000  # the indexes' expression: changing it needs a migration of the indexes
SEARCH_MIN_CHARS = 3
INDEXED_TABS = ("dead", "done", "expired")


def text_search(q: str) -> Q:
    """Substring search over the excerpts of task and last error, or a job id. ``icontains`` on the
    excerpt compiles to ``UPPER(LEFT(col, 2000)) LIKE UPPER('%q%')``: the indexed expression."""
    return (
        Q(IContains(Left("task", SEARCH_EXCERPT_CHARS), q))
        | Q(IContains(Left("last_error", SEARCH_EXCERPT_CHARS), q))
        | Q(pk=q.strip().lower())
    )


def search_refusal(tab: str, q: str) -> str:
    """Why ``q`` on ``tab`` is not searched as text (it then matches a job id only), or ""."""
    q = q.strip()
    if not q:
        return ""
    if len(q) < SEARCH_MIN_CHARS:
        return (
            f"Text search needs at least {SEARCH_MIN_CHARS} characters: shorter text matches nearly every job "
            "and no index can serve it. Showing the job with this id, if any."
        )
    if tab not in INDEXED_TABS:
        count = tab_counts()[tab]
        limit = settings.LESSONQ_EXACT_COUNT_LIMIT
        if count.estimated or count.value > limit:
            return (
                f"Text search on the {TABS[tab].label} tab is off while it holds more than {limit:,} jobs "
                "(no index serves it there): narrow by trigger, agent, workspace or age, or search the "
                "Dead or Done tab. Showing the job with this id, if any."
            )
    return ""


# --- keyset pages ----------------------------------------------------------------------------------------

ORDERINGS: dict[str, tuple[tuple[str, bool], ...]] = {  # (field, descending)
    "newest": (("enqueued_at", True), ("id", True)),
    "oldest": (("enqueued_at", False), ("id", False)),
    "attempts": (("attempts", True), ("enqueued_at", True), ("id", True)),
}


@dataclass(frozen=True)
class Page:
    rows: list[Job]
    next_cursor: str | None


def _encode(values: list[Any]) -> str:
    raw = json.dumps([v.isoformat() if isinstance(v, datetime) else v for v in values])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(cursor: str, keys: tuple[tuple[str, bool], ...]) -> list[Any] | None:
    """The cursor's values, each of its key's type — an aware time for ``*_at``, an int for ``attempts``, a
    JobID for ``id`` — or ``None``: a hand-edited cursor starts from the top (never a 500)."""
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(values, list) or len(values) != len(keys):
            return None
        decoded: list[Any] = []
        for value, (name, _) in zip(values, keys, strict=True):
            if name.endswith("_at"):
                if not isinstance(value, str):
                    return None
                moment = datetime.fromisoformat(value)
                if moment.tzinfo is None:
                    return None
                decoded.append(moment)
            elif name == "attempts":
                if type(value) is not int or not 0 <= value < 2**31:
                    return None
                decoded.append(value)
            elif name == "id":
                if not isinstance(value, str) or not is_job_id(value):
                    return None
                decoded.append(value)
            else:  # pragma: no cover - every ordering's keys are above
                return None
        return decoded
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError, RecursionError):
        return None  # a hand-edited cursor starts from the top


def after(keys: tuple[tuple[str, bool], ...], values: list[Any]) -> Q:
    """Rows strictly after ``values`` in the ordering ``keys``: the first key bounds the index range,
    the expansion breaks ties (equal timestamps) on the following keys down to the primary key."""
    (first, first_desc) = keys[0]
    condition = Q(**{f"{first}__{'lte' if first_desc else 'gte'}": values[0]})
    expansion = Q()
    for i, (name, desc) in enumerate(keys):
        equal = {k: v for (k, _), v in zip(keys[:i], values[:i], strict=True)}
        expansion |= Q(**equal, **{f"{name}__{'lt' if desc else 'gt'}": values[i]})
    return condition & expansion


def keyset(qs: JobQuerySet, *, sort: str, cursor: str | None, size: int) -> Page:
    keys = ORDERINGS.get(sort, ORDERINGS["newest"])
    qs = qs.order_by(*[f"-{name}" if desc else name for name, desc in keys])
    values = _decode(cursor, keys) if cursor else None
    if values is not None:
        qs = qs.filter(after(keys, values))
    rows = list(qs.for_list().select_related("workspace")[: size + 1])
    if len(rows) <= size:
        return Page(rows, None)
    rows = rows[:size]
    return Page(rows, _encode([getattr(rows[-1], name) for name, _ in keys]))


# --- counts: cached for everyone, estimated when big -------------------------------------------------------


@dataclass(frozen=True)
class TabCount:
    value: int
    estimated: bool = False


def estimate(qs: QuerySet[Any]) -> int:
    """PostgreSQL's planner estimate of the rows ``qs`` returns (no scan)."""
    sql, params = qs.query.sql_with_params()
    with connection.cursor() as cur:
        cur.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cur.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def capped_count(qs: QuerySet[Any], *, limit: int | None = None) -> TabCount:
    """Exact up to ``limit`` (a LIMITed count stops early); above it, the planner's estimate."""
    limit = limit or settings.LESSONQ_EXACT_COUNT_LIMIT
    exact = qs.order_by()[: limit + 1].count()
    if exact <= limit:
        return TabCount(exact)
    return TabCount(max(estimate(qs.order_by()), limit), estimated=True)


COUNTS_KEY = "lessonq:triage:tab-counts"


def tab_counts(*, fresh: bool = False) -> dict[str, TabCount]:
    """Counts per tab, shared between viewers through the cache for ``LESSONQ_COUNTS_TTL`` (so N open
    tabs polling cost one set of queries per TTL, not N)."""
    if not fresh:
        cached = cache.get(COUNTS_KEY)
        if cached is not None:
            return {slug: TabCount(*pair) for slug, pair in cached.items()}
    counts = {slug: capped_count(tab_jobs(tab)) for slug, tab in TABS.items()}
    cache.set(COUNTS_KEY, {s: (c.value, c.estimated) for s, c in counts.items()}, settings.LESSONQ_COUNTS_TTL)
    return counts


def forget_counts() -> None:
    """After an action: the next poll shows the change instead of a cached number."""
    cache.delete_many([COUNTS_KEY, GROUPS_KEY])


# --- error groups ------------------------------------------------------------------------------------------

WINDOWS = (("1h", timedelta(hours=1)), ("24h", timedelta(hours=24)), ("7d", timedelta(days=7)))
GROUPS_KEY = "lessonq:triage:groups"


@dataclass(frozen=True)
class ErrorGroup:
    fingerprint: str
    trigger: str
    signature: str
    total: int
    windows: dict[str, int]
    last_seen: datetime | None


def error_groups(*, limit: int = 200, now: datetime | None = None) -> list[ErrorGroup]:
    """Dead jobs grouped by fingerprint (trigger + normalised error), with counts over 1 h / 24 h / 7 d
    by time of death; busiest in the last 24 h first. Cached like the tab counts."""
    cached = cache.get(GROUPS_KEY) if now is None else None
    if cached is not None:
        return [ErrorGroup(**g) for g in cached][:limit]
    now = now or timezone.now()
    since = {name: now - delta for name, delta in WINDOWS}
    rows: list[Any] = list(
        Job.objects.dead()
        .order_by()
        .values("fingerprint", "trigger")
        .annotate(
            total=Count("id"),
            last_seen=Max("finished_at"),
            signature=Max("error_signature"),
            w1h=Count("id", filter=Q(finished_at__gte=since["1h"])),
            w24h=Count("id", filter=Q(finished_at__gte=since["24h"])),
            w7d=Count("id", filter=Q(finished_at__gte=since["7d"])),
        )
        .order_by("-w24h", "-total", "fingerprint")[:limit]
    )
    groups = [
        ErrorGroup(
            fingerprint=r["fingerprint"],
            trigger=r["trigger"],
            signature=r["signature"] or "(no error text)",
            total=r["total"],
            windows={name: r[f"w{name}"] for name, _ in WINDOWS},
            last_seen=r["last_seen"],
        )
        for r in rows
    ]
    cache.set(GROUPS_KEY, [g.__dict__ for g in groups], settings.LESSONQ_COUNTS_TTL)
    return groups


# --- eligibility preview of a bulk action -------------------------------------------------------------------


@dataclass
class Preview:
    kind: str
    scope: str  # "selection" or "filter"
    matched: int = 0
    eligible: int = 0
    remote: dict[str, int] = field(default_factory=dict)  # node -> eligible jobs whose record lives there
    ineligible: dict[str, int] = field(default_factory=dict)  # reason -> count
    cap: int = 0
    run_ids: list[str] = field(default_factory=list)  # the ids that will run (eligible, capped)

    @property
    def over_cap(self) -> int:
        return max(0, self.eligible - self.cap)


STATE_REASONS: dict[str, str] = {
    JobState.PENDING: "not dead: pending",
    JobState.RUNNING: "not dead: running",
    JobState.RETRY_WAIT: "not dead: waiting to retry",
    JobState.SUCCEEDED: "already succeeded",
    JobState.SKIPPED: "skipped (nothing actionable)",
    JobState.PURGED: "already purged",
    JobState.EXPIRED: "expired",
}


def preview(
    kind: str, jobs: QuerySet[Job], *, scope: str, sort: str = "newest", requested: int | None = None
) -> Preview:
    """What a bulk ``kind`` over ``jobs`` would do: how many match, how many are eligible (dead), which
    are not and why, how many are on another node (their record lives there: the action is sent to
    it), and the capped list of ids that would run, in the page's order."""
    cap = settings.LESSONQ_BULK_CAP
    result = Preview(kind=kind, scope=scope, cap=cap)
    by_state: dict[str, int] = dict(jobs.order_by().values_list("state").annotate(n=Count("id")))
    result.matched = sum(by_state.values())
    if requested is not None and requested > result.matched:
        result.ineligible["not found"] = requested - result.matched
    for state, n in by_state.items():
        if state == JobState.DEAD:
            result.eligible = n
        else:
            result.ineligible[STATE_REASONS.get(state, state)] = n
    dead = jobs.filter(state=JobState.DEAD)
    result.remote = dict(
        dead.exclude(node=settings.LESSONQ_QUEUE).order_by().values_list("node").annotate(n=Count("id"))
    )
    keys = ORDERINGS.get(sort, ORDERINGS["newest"])
    ordered = dead.order_by(*[f"-{name}" if desc else name for name, desc in keys])
    result.run_ids = list(ordered.values_list("pk", flat=True)[:cap])
    return result


# --- job detail ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordInfo:
    location: str  # "wal", "dlq", "expired", "archive", "" (none), or "node:<queue>"
    path: Path | None = None
    size: int | None = None
    contents: str = ""
    error: str = ""


RECORD_SHOWN_BYTES = 256 * 1024
TOO_BIG = "not decoded here: records over {limit} bytes are not shown on the page"


def record_info(job: Job) -> RecordInfo:
    """Where the job's WAL record lives, its size and its decoded envelope (records live on the node
    that accepted the job: for another node's job only the location is known here)."""
    if job.node != settings.LESSONQ_QUEUE:
        return RecordInfo(location=f"node:{job.node}")
    candidates: list[tuple[str, Path]] = [
        ("wal", wal().path(job.id)),
        ("dlq", dlq().path(job.id)),
        ("expired", expired_dir() / f"{job.id}.wal"),
        *[("archive", p) for p in sorted((base() / "archive").glob(f"*/{job.id}.wal"))],
    ]
    for location, path in candidates:
        try:
            size = path.stat().st_size
            if size > RECORD_SHOWN_BYTES:
                # A 14 MiB record is not decoded into a page: the payloads show as previews above.
                return RecordInfo(location, path, size, error=TOO_BIG.format(limit=RECORD_SHOWN_BYTES))
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        from lessonq.wal import decode, unframe

        try:
            contents = json.dumps(decode(unframe(data)).envelope(), indent=2, ensure_ascii=False)
        except (WalError, ValueError) as exc:
            return RecordInfo(location, path, len(data), error=f"unreadable: {exc}")
        return RecordInfo(location, path, len(data), contents)
    return RecordInfo(location="")


@dataclass(frozen=True)
class Event:
    at: datetime
    what: str
    detail: str = ""
    tone: str = ""


def timeline(job: Job) -> list[Event]:
    events = [Event(job.enqueued_at, "enqueued", f"trigger {job.trigger}")]
    for a in job.attempt_rows.all():
        events.append(Event(a.started_at, f"attempt {a.number} started", a.worker))
        if a.finished_at:
            tone = "ok" if a.outcome in ("success", "skipped") else "bad"
            events.append(Event(a.finished_at, f"attempt {a.number}: {a.outcome}", a.error[:300], tone))
    for e in AuditEvent.objects.filter(object_type="queue.job", object_ids__contains=[job.id]).select_related(
        "actor_user", "actor_token"
    )[:50]:
        events.append(Event(e.created_at, e.action, f"by {e.actor}: {e.result.get('outcome', '')} {e.reason}".strip()))
    if job.finished_at:
        events.append(Event(job.finished_at, job.get_state_display(), "", "bad" if job.state == JobState.DEAD else ""))
    return sorted(events, key=lambda e: e.at)


def similar_dead_jobs(job: Job, *, limit: int = 10) -> tuple[int, list[Job], list[Job]]:
    """Same fingerprint (count and newest few), and dead jobs whose signature is trigram-similar."""
    same = Job.objects.dead().filter(fingerprint=job.fingerprint).exclude(pk=job.pk)
    count = same.count()
    newest = list(same.for_list().order_by("-finished_at", "-id")[:limit])
    similar: list[Job] = []
    if job.error_signature:
        similar = list(
            Job.objects.dead()
            .for_list()
            .exclude(fingerprint=job.fingerprint)
            .filter(error_signature__trigram_similar=job.error_signature)
            .annotate(similarity=TrigramSimilarity("error_signature", job.error_signature))
            .order_by("-similarity", "-id")[:limit]
        )
    return count, newest, similar


def similar_lessons(job: Job, *, limit: int = 5) -> tuple[str, list[Any], str]:
    """ "Seen this before?" over the lesson store: ``(method, lessons, why_none)``, each lesson with a
    ``similarity`` attribute (docs/triage.md#seen-this-before).

    With ``lessons.retrieval`` present: exactly what a retrieve of the job's task in the job's workspace
    would serve — the same search, the same filters, the same floor (an off-topic task gets nothing, never
    unrelated lessons at a score near zero). ``why_none`` says why the list is empty ("none above the
    floor", or no lesson matches). Without it: trigram similarity of the lesson content to the job's task
    and normalised error, in the job's workspace (no index; the store is small next to the queue)."""
    from lessons.models import Lesson

    task = getattr(job, "task_preview", None)  # the job page loads previews, not the payloads
    text = (job.task if task is None else task).strip()
    slug = job.workspace.slug if job.workspace is not None else ""
    where = f"in workspace {slug}" if slug else "across workspaces (the job names none)"
    if not text:
        return "none", [], "the job has no task to retrieve for"
    try:
        retrieval = importlib.import_module("lessons.retrieval")
    except ImportError:
        retrieval = None
    if retrieval is not None and hasattr(retrieval, "search"):
        result = retrieval.search(text, k=limit, filters=retrieval.Filters(workspace=slug))
        for hit in result.hits:
            hit.lesson.similarity = hit.score
        floor = result.explanation.get("floor")
        method = f"what retrieval would serve for this task {where}"
        if not isinstance(floor, dict):
            method += "; the floor is off (it needs embeddings)"
        why = ""
        if not result.hits:
            why = "None above the floor: " + result.reason if result.reason.startswith("no lesson applies") else ""
            why = why or f"No lesson matches this task {where}."
        return method, [hit.lesson for hit in result.hits], why
    probe = f"{text[:500]}\n{job.error_signature}".strip()
    scoped = Lesson.objects.active().filter(workspace=job.workspace) if slug else Lesson.objects.active()
    lessons = list(
        scoped.annotate(similarity=TrigramSimilarity("content", probe))
        .filter(similarity__gt=0.08)
        .order_by("-similarity", "-id")[:limit]
    )
    return f"trigram similarity {where}", lessons, "" if lessons else f"No similar lesson {where}."
