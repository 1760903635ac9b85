"""Knowledge gaps: tasks for which no lesson applied, grouped so that twenty phrasings of one missing
lesson show as one row with a count.

Grouping is greedy and single-pass over the newest ``GAP_WINDOW`` open gaps, newest first: a task
joins the first group whose first (newest) task is at least ``GAP_GROUP_SIMILARITY`` cosine-similar,
else it starts a group. Tasks without a vector yet (the embed worker has not reached them, or no provider
is configured) fall back to grouping by identical text. One matrix product per task over the groups'
heads (numpy).

Before grouping, each open gap with a vector of the current model is checked against the store the way a
retrieve would (docs/lessons.md#gaps): the nearest active lesson of the gap's workspace (HNSW,
``retrieval.vector_branch``) and the retrieval floor (``retrieval.floor_passes``). A gap a lesson would now
be served for is **closed** (``gap_dismissed_at`` with ``gap_answered_by``). The rest are told apart:
**off-domain** when the floor's software-work classifier says the task is not software work (a retrieve
answers it with nothing, so no lesson closes it) or when it is at least as close to the floor's everyday
off-topic sentences as to anything the workspace does (its nearest lesson, and the tasks it retrieved
lessons for), a real gap otherwise.

The groups are a maintained view (docs/api.md#limits): ``refresh()`` computes them into a
``DerivedState`` row, run by beat (``LESSONBOARD_DERIVED_REFRESH_INTERVAL``) and soon after the embed
worker stores a gap's vector; ``dismiss`` takes the closed tasks out of the row at once. Pages read the
row (``open_gap_groups``) and never group. One refresh at a time (an advisory lock), and it writes under
the row's lock that ``dismiss`` takes, leaving out gaps closed since it read them. Each gap's nearest
lesson is kept in the row: a refresh searches the store only for new gaps and for gaps whose nearest lesson
changed or went, and compares the lessons changed since the last refresh with every other gap (``Known``,
``classify``), with a full pass at least every ``FULL_PASS_EVERY``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Q
from django.urls import reverse
from django.utils import timezone

from lessonboard import locks
from lessonboard.celery import app
from lessonboard.models import DerivedState
from lessons.usage.models import Retrieval


@dataclass
class GapGroup:
    task: str  # the newest task of the group, shown as its title
    newest: datetime
    ids: list[int] = field(default_factory=list)
    agents: set[str] = field(default_factory=set)
    workspaces: set[str] = field(default_factory=set)
    examples: list[str] = field(default_factory=list)  # up to three other phrasings
    members: list[str] = field(default_factory=list)  # each id's workspace slug ("" for none), as ``ids``
    off_domain: bool = False  # every task of the group with a verdict looks off-domain (module docstring)

    @property
    def count(self) -> int:
        return len(self.ids)

    @property
    def write_url(self) -> str:
        """The lesson list's "Write a lesson" form, prefilled with the group's task."""
        return reverse("lessons:search") + "?" + urlencode({"new": self.task[:2000]}) + "#new-lesson"


SNAPSHOT = "lessons.gap_groups"


def _domain_vectors(slug: str, model_id: str) -> np.ndarray | None:
    """The workspace's own domain: the newest tasks it retrieved lessons for (not gaps), unit vectors."""
    rows = list(
        Retrieval.objects.filter(workspace=slug, gap=False, embedding__isnull=False, embedding_model=model_id)
        .order_by("-id")
        .values_list("embedding", flat=True)[: settings.GAP_WINDOW]
    )
    return np.stack([_unit(np.asarray(v, dtype=np.float32)) for v in rows]) if rows else None


# What a refresh keeps between runs to avoid searching the store again for every open gap (``Known``):
# - ``CHANGE_LAG``: lessons changed up to this long before the last refresh began are looked at again, so a
#   change whose transaction committed a while after its timestamp (or a vector stored after its text was
#   read) is not missed;
# - ``FULL_PASS_EVERY``: at most this long between two refreshes that search every gap afresh, whatever the
#   log of changes says (a workspace renamed, a change older than the lag);
# - ``INCREMENTAL_MAX``: with more changed lessons than this (a re-embed, a big import) the refresh searches
#   every gap instead of comparing each with every changed lesson.
CHANGE_LAG = timedelta(minutes=10)
FULL_PASS_EVERY = timedelta(hours=1)
INCREMENTAL_MAX = 10_000
SAME_SIMILARITY = 1e-5  # numpy's float32 cosine against pgvector's, for the same two vectors


@dataclass
class Known:
    """The last refresh's nearest lesson per gap (``gap id → [lesson id, similarity]`` or ``None``) and when
    that refresh began: valid for every lesson not changed since, under the same embedding model."""

    nearest: dict[str, Any]
    since: datetime


def _changed_lessons(since: datetime) -> set[int] | None:
    """Lessons added, edited, archived, moved, shared or embedded since ``since`` (less ``CHANGE_LAG``), the
    tombstones included; ``None`` when there are more than ``INCREMENTAL_MAX``."""
    from lessons.models import Lesson

    after = since - CHANGE_LAG
    ids = list(
        Lesson.objects.filter(Q(updated_at__gt=after) | Q(embedded_at__gt=after))
        .order_by()
        .values_list("id", flat=True)[: INCREMENTAL_MAX + 1]
    )
    return set(ids) if len(ids) <= INCREMENTAL_MAX else None


class _NearestLessons:
    """Each gap's nearest lesson, as that gap's workspace's retrieve would search (its own lessons and the
    shared tier), reusing ``known`` where it still holds (``classify``)."""

    def __init__(self, known: Known | None, model_id: str) -> None:
        from lessons.models import Lesson

        self.model_id = model_id
        self.changed = _changed_lessons(known.since) if known else None
        self.cache = known.nearest if known and self.changed is not None else {}
        cached_ids = {entry[0] for entry in self.cache.values() if entry}
        present = set(Lesson.objects.filter(pk__in=cached_ids).values_list("pk", flat=True)) if cached_ids else set()
        self.gone = cached_ids - present
        self._fresh: dict[str, tuple[list[int], dict[int, int], np.ndarray]] = {}
        self._bases: dict[str, tuple[Any, list[int] | None]] = {}

    def of(self, pk: int, slug: str, vector: np.ndarray) -> list[tuple[int, float]]:
        """``[(lesson id, similarity)]``, or ``[]`` when the workspace is served no lesson."""
        entry = self.cache.get(str(pk), False)
        if entry is False or (entry and entry[0] in self.gone):
            return self._search(slug, vector)
        nearest = [tuple(entry)] if entry else []
        ids, rows, matrix = self._changed_for(slug)
        similarities = matrix @ _unit(vector) if ids else np.empty(0)
        if entry and self.changed and entry[0] in self.changed:
            # The known nearest lesson changed itself: still the nearest only if it is still served and no
            # farther than it was (every unchanged lesson was at most that close).
            row = rows.get(entry[0])
            if row is None or float(similarities[row]) < float(entry[1]) - SAME_SIMILARITY:
                return self._search(slug, vector)
        if ids:
            top = int(np.argmax(similarities))
            if not nearest or float(similarities[top]) > float(nearest[0][1]):
                nearest = [(ids[top], float(similarities[top]))]
        return nearest

    def _search(self, slug: str, vector: np.ndarray) -> list[tuple[int, float]]:
        from lessons import retrieval
        from lessons.models import Lesson

        if slug not in self._bases:
            base = retrieval.Filters(workspace=slug, scope="all").apply(Lesson.objects.all())
            self._bases[slug] = (base, retrieval.vector_candidates(base, self.model_id))
        base, few = self._bases[slug]
        return retrieval.vector_branch(vector, base, 1, self.model_id, few=few)

    def _changed_for(self, slug: str) -> tuple[list[int], dict[int, int], np.ndarray]:
        """The changed lessons that workspace is served: their ids, each id's row, their unit vectors."""
        from lessons import retrieval
        from lessons.models import Lesson

        if slug not in self._fresh:
            changed = Lesson.objects.filter(pk__in=self.changed or ())
            base = retrieval.Filters(workspace=slug, scope="all").apply(changed)
            found = list(
                base.filter(embedding__isnull=False, embedding_model=self.model_id).values_list("id", "embedding")
            )
            matrix = np.stack([_unit(np.asarray(v, dtype=np.float32)) for _, v in found]) if found else np.empty((0, 0))
            ids = [pk for pk, _ in found]
            self._fresh[slug] = (ids, {pk: row for row, pk in enumerate(ids)}, matrix)
        return self._fresh[slug]


def classify(
    window: list[tuple[Any, ...]], known: Known | None = None
) -> tuple[dict[int, int], set[int], dict[str, Any]]:
    """``(answered, off_domain, nearest)`` for the window's gaps with a vector of the current model: the gaps
    a lesson would now be served for (gap id → lesson id), the off-domain ones (module docstring), and each
    gap's nearest lesson ``[id, similarity]``.

    ``known``: the last refresh's nearest lessons. A gap it covers is searched again only when its nearest
    lesson has gone, or has changed and is now farther or no longer served; otherwise its nearest lesson is
    the known one or a closer one among the lessons changed since (exact cosine over those few). A new gap
    is searched."""
    from lessons import embeddings, retrieval

    provider = embeddings.provider()
    answered: dict[int, int] = {}
    off: set[int] = set()
    nearest_of: dict[str, Any] = {}
    if provider is None:
        return answered, off, nearest_of
    model_id = provider.model_id
    finder = _NearestLessons(known, model_id)
    domains: dict[str, np.ndarray | None] = {}
    for pk, _task, _agent, slug, _created, embedding, gap_model in window:
        if embedding is None or gap_model != model_id:
            continue
        vector = np.asarray(embedding, dtype=np.float32)
        nearest = finder.of(pk, slug or "", vector)
        nearest_of[str(pk)] = list(nearest[0]) if nearest else None
        best = float(nearest[0][1]) if nearest else -1.0
        if bool(retrieval.not_software_work(vector, provider)[0]):  # retrieve answers it with nothing
            off.add(pk)
            continue
        if nearest and bool(retrieval.floor_passes(vector, [best], provider)[0]):
            answered[pk] = int(nearest[0][0])
            continue
        if slug not in domains:
            domains[slug] = _domain_vectors(slug, model_id)
        corpus = domains[slug]
        domain = max(best, float(np.max(corpus @ _unit(vector))) if corpus is not None else -1.0)
        if nearest or corpus is not None:  # with nothing to compare against, it cannot be told
            if float(retrieval.background_similarity(vector, provider)[0]) >= domain:
                off.add(pk)
    return answered, off, nearest_of


REEMBED_PER_REFRESH = 200


def reembed_other_models(window: list[Any]) -> int:
    """Queue the task vectors again of open gaps embedded by another model than today's (the embedding
    model was switched): ``classify`` skips them, so they would never close on their own nor group with
    the new ones. At most ``REEMBED_PER_REFRESH`` a refresh, each at most once in 10 minutes."""
    from django.core.cache import cache

    from lessons import embeddings
    from lessons.usage.task_vectors import schedule_task_embedding

    provider = embeddings.provider()
    if provider is None:
        return 0
    queued = 0
    for pk, *_rest, embedding, model_id in window:
        if embedding is None or model_id == provider.model_id or queued >= REEMBED_PER_REFRESH:
            continue
        if cache.add(f"gaps:reembed:{pk}", 1, timeout=600):
            schedule_task_embedding(pk)
            queued += 1
    return queued


def close_answered(answered: dict[int, int]) -> int:
    """Close the gaps a lesson would now be served for, naming the lesson."""
    now = timezone.now()
    closed = 0
    for lesson_id in set(answered.values()):
        ids = [pk for pk, lid in answered.items() if lid == lesson_id]
        closed += Retrieval.objects.gaps().filter(pk__in=ids).update(gap_dismissed_at=now, gap_answered_by_id=lesson_id)
    return closed


def compute_gap_groups(*, workspace: str = "") -> list[GapGroup]:
    """The open gaps, grouped, biggest groups first (ties: newest first), nothing closed."""
    return _grouped(workspace=workspace)[0]


def _grouped(
    *, workspace: str = "", close: bool = False, known: Known | None = None
) -> tuple[list[GapGroup], dict[str, Any]]:
    """The work ``refresh`` does: ``(groups, nearest)`` (``close``: first close the gaps a lesson would now
    be served for; ``known`` and ``nearest``: see ``classify``)."""
    rows = Retrieval.objects.gaps()
    if workspace:
        rows = rows.filter(workspace=workspace)
    window = list(
        rows.order_by("-created_at", "-id").values_list(
            "id", "task", "agent", "workspace", "created_at", "embedding", "embedding_model"
        )[: settings.GAP_WINDOW]
    )
    answered, off, nearest = classify(window, known)
    if close and answered:
        close_answered(answered)
    if close:
        reembed_other_models(window)
    window = [row for row in window if row[0] not in answered]
    verdicts: dict[int, list[bool]] = {}
    groups: list[GapGroup] = []
    # The groups' head vectors by model (e5's and MiniLM's are both 384-d, but not comparable), in the
    # order the groups were made (first match wins).
    heads: dict[str, tuple[np.ndarray, list[int]]] = {}
    by_text: dict[str, GapGroup] = {}
    threshold = settings.GAP_GROUP_SIMILARITY
    for pk, task, agent, slug, created, embedding, model_id in window:
        vector = None if embedding is None else _unit(np.asarray(embedding, dtype=np.float32))
        group = None
        if vector is not None and model_id in heads:
            matrix, owners = heads[model_id]
            hits = np.flatnonzero(matrix[: len(owners)] @ vector >= threshold)
            if hits.size:
                group = groups[owners[int(hits[0])]]
        key = " ".join(task.lower().split())
        if group is None:
            group = by_text.get(key)
        if group is None:
            group = GapGroup(task=task, newest=created)
            groups.append(group)
            if vector is not None:
                matrix, owners = heads.setdefault(
                    model_id, (np.empty((len(window), vector.shape[0]), dtype=np.float32), [])
                )
                matrix[len(owners)] = vector
                owners.append(len(groups) - 1)
            by_text[key] = group
        elif len(group.examples) < 3 and key != " ".join(group.task.lower().split()):
            group.examples.append(task)
        group.ids.append(pk)
        if embedding is not None and model_id:
            verdicts.setdefault(id(group), []).append(pk in off)
        group.members.append(slug or "")
        if agent:
            group.agents.add(agent)
        if slug:
            group.workspaces.add(slug)
    for group in groups:
        seen = verdicts.get(id(group), [])
        group.off_domain = bool(seen) and all(seen)
    return sorted(groups, key=lambda g: (-g.count, -g.newest.timestamp())), nearest


def _dump(group: GapGroup) -> dict[str, Any]:
    return {
        "task": group.task,
        "newest": group.newest.isoformat(),
        "ids": group.ids,
        "members": group.members,
        "agents": sorted(group.agents),
        "examples": group.examples,
        "off_domain": group.off_domain,
    }


def _load(data: dict[str, Any], *, workspace: str = "") -> GapGroup | None:
    ids, members = data["ids"], data.get("members") or [""] * len(data["ids"])
    if workspace:
        kept = [(pk, slug) for pk, slug in zip(ids, members, strict=True) if slug == workspace]
        if not kept:
            return None
        ids, members = [pk for pk, _ in kept], [slug for _, slug in kept]
    return GapGroup(
        task=data["task"],
        newest=datetime.fromisoformat(data["newest"]),
        ids=list(ids),
        members=list(members),
        agents=set(data["agents"]),
        workspaces={slug for slug in members if slug},
        examples=list(data["examples"]),
        off_domain=bool(data.get("off_domain", False)),
    )


def _inputs() -> list[Any]:
    """What the grouping depends on, cheaply: open gaps, the newest, how many have a vector, the settings."""
    from lessons.models import Lesson

    seen = Retrieval.objects.gaps().aggregate(n=Count("id"), last=Max("id"), embedded=Count("embedding"))
    # A lesson added, edited, archived, moved, shared or (re-)embedded may close a gap (its ``updated_at`` or
    # ``embedded_at`` moves; both indexed, so these are two index reads, not a scan of the table); a newly
    # served task moves the domain. A lesson deleted outright (the admin, the demo's cleanup; the API and
    # the pages leave tombstones) is seen by the next refresh that runs for another reason.
    store = Lesson.objects.aggregate(changed=Max("updated_at"), embedded=Max("embedded_at"))
    served = Retrieval.objects.filter(gap=False).aggregate(last=Max("id"))
    window, threshold = settings.GAP_WINDOW, settings.GAP_GROUP_SIMILARITY
    changed = [store[key].isoformat() if store[key] else None for key in ("changed", "embedded")]
    return [seen["n"], seen["last"], seen["embedded"], window, threshold, *changed, served["last"]]


def refresh(*, force: bool = False) -> int:
    """Group the open gaps into the maintained row (skipped while its inputs are unchanged); the number of
    groups. One refresh at a time across every process: while another holds the lock (a beat run that
    outlasts its interval, a ``refresh_soon`` beside it), this one returns the row's count at once rather
    than repeat the same work. Each gap's nearest lesson is kept in the row and searched again only when
    it may have changed (``classify``), with a full pass at least every ``FULL_PASS_EVERY``."""
    from lessons import embeddings

    with locks.alone(REFRESH_LOCK) as alone:
        if not alone:
            data = DerivedState.read(SNAPSHOT)
            return len(data.get("groups", [])) if data else 0
        inputs = _inputs()
        data = DerivedState.read(SNAPSHOT)
        if not force and data and data.get("inputs") == inputs:
            return len(data.get("groups", []))
        began = timezone.now()
        provider = embeddings.provider()
        model_id = provider.model_id if provider else ""
        known, full_at = _known(data, model_id, began)
        groups, nearest = _grouped(close=True, known=known)
        kept = {"model": model_id, "since": began.isoformat(), "full_at": (full_at or began).isoformat()}
        return _store(groups, nearest, kept)


def _known(data: dict[str, Any] | None, model_id: str, now: datetime) -> tuple[Known | None, datetime | None]:
    """The last refresh's nearest lessons, if still usable (same model, a full pass within
    ``FULL_PASS_EVERY``), and when that full pass was; ``(None, None)``: search every gap."""
    kept = (data or {}).get("store")
    if not isinstance(kept, dict) or kept.get("model") != model_id or not model_id:
        return None, None
    full_at = datetime.fromisoformat(kept["full_at"])
    if now - full_at >= FULL_PASS_EVERY:
        return None, None
    return Known(nearest=(data or {}).get("nearest") or {}, since=datetime.fromisoformat(kept["since"])), full_at


# The advisory lock ``refresh`` holds (a PostgreSQL session lock: a process that dies lets it go).
REFRESH_LOCK = int.from_bytes(hashlib.sha256(SNAPSHOT.encode()).digest()[:8], "big", signed=True)


def _store(groups: list[GapGroup], nearest: dict[str, Any], store: dict[str, Any]) -> int:
    """Write computed groups, less the gaps closed while they were computed (a person's ``dismiss``): under
    the row's lock, which ``dismiss`` takes too, so neither write undoes the other. The number of groups."""
    raw = [_dump(group) for group in groups]
    # The first refresh ever has no row to lock yet: an empty one first (read as "not refreshed yet").
    DerivedState.objects.get_or_create(pk=SNAPSHOT)
    with transaction.atomic():
        DerivedState.objects.select_for_update().filter(pk=SNAPSHOT).first()
        listed = [pk for group in raw for pk in group["ids"]]
        still_open = set(Retrieval.objects.gaps().filter(pk__in=listed).values_list("pk", flat=True))
        raw = _without(raw, set(listed) - still_open)
        inputs = _inputs()  # closing gaps changed them
        DerivedState.write(SNAPSHOT, {"groups": raw, "inputs": inputs, "store": store, "nearest": nearest})
    return len(raw)


def _without(raw_groups: list[dict[str, Any]], gone: set[int]) -> list[dict[str, Any]]:
    """Stored groups without the ``gone`` gaps (a group left empty goes), biggest first again."""
    if not gone:
        return raw_groups
    kept = []
    for raw in raw_groups:
        members = raw.get("members") or [""] * len(raw["ids"])
        pairs = [(pk, slug) for pk, slug in zip(raw["ids"], members, strict=True) if pk not in gone]
        if pairs:
            kept.append({**raw, "ids": [pk for pk, _ in pairs], "members": [slug for _, slug in pairs]})
    kept.sort(key=lambda g: (-len(g["ids"]), -datetime.fromisoformat(g["newest"]).timestamp()))
    return kept


def refresh_soon() -> None:
    """After an input changed (a gap's vector stored): a refresh within a few seconds, at most one queued
    at a time (the beat task refreshes anyway)."""
    from django.core.cache import cache

    if not cache.add(f"{SNAPSHOT}:queued", 1, timeout=5):
        return
    try:  # published by name: the console's task module imports this one
        app.send_task("console.tasks.refresh_derived", countdown=2)
    except Exception:  # the broker is down: beat's refresh will do
        cache.delete(f"{SNAPSHOT}:queued")


def open_gap_groups(*, workspace: str = "") -> list[GapGroup]:
    """The open gaps, grouped, biggest groups first (ties: newest first), as last maintained (one row
    read; ``[]`` before the first refresh). With ``workspace``: the groups' tasks of that workspace."""
    data = DerivedState.read(SNAPSHOT)
    if not data:
        return []
    groups = [g for g in (_load(raw, workspace=workspace) for raw in data.get("groups", [])) if g is not None]
    if workspace:
        groups.sort(key=lambda g: (-g.count, -g.newest.timestamp()))
    return groups


def dismiss(ids: list[int]) -> int:
    """Close these gaps (a person decided no lesson is needed); returns how many were open. The maintained
    groups lose them at once."""
    with transaction.atomic():
        closed = Retrieval.objects.gaps().filter(pk__in=ids).update(gap_dismissed_at=timezone.now())
        row = DerivedState.objects.select_for_update().filter(pk=SNAPSHOT).first()
        if row is not None and closed:
            row.data = {**row.data, "groups": _without(row.data.get("groups", []), set(ids))}
            row.save(update_fields=["data"])
    return closed


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector
