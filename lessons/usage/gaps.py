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
**off-domain** when the task is at least as close to the floor's everyday off-topic sentences as to anything
the workspace does (its nearest lesson, and the tasks it retrieved lessons for), a real gap otherwise.

The groups are a maintained view (docs/api.md#limits): ``refresh()`` computes them into a
``DerivedState`` row, run by beat (``LESSONBOARD_DERIVED_REFRESH_INTERVAL``) and soon after the embed
worker stores a gap's vector; ``dismiss`` takes the closed tasks out of the row at once. Pages read the
row (``open_gap_groups``) and never group. One refresh at a time (an advisory lock), and it writes under
the row's lock that ``dismiss`` takes, leaving out gaps closed since it read them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max
from django.urls import reverse
from django.utils import timezone

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


def classify(
    window: list[tuple[Any, ...]], nearest_cache: dict[str, Any] | None = None
) -> tuple[dict[int, int], set[int], dict[str, Any]]:
    """``(answered, off_domain, nearest)`` for the window's gaps with a vector of the current model: the gaps
    a lesson would now be served for (gap id → lesson id), the off-domain ones (module docstring), and each
    gap's nearest lesson ``[id, similarity]``. ``nearest_cache``: the last refresh's ``nearest``, valid
    while the lesson store has not changed — a refresh that only saw new gaps or served tasks runs the
    nearest-lesson search for the new gaps only."""
    from lessons import embeddings, retrieval
    from lessons.models import Lesson

    provider = embeddings.provider()
    answered: dict[int, int] = {}
    off: set[int] = set()
    nearest_of: dict[str, Any] = {}
    if provider is None:
        return answered, off, nearest_of
    cache = nearest_cache or {}
    domains: dict[str, np.ndarray | None] = {}
    for pk, _task, _agent, slug, _created, embedding, model_id in window:
        if embedding is None or model_id != provider.model_id:
            continue
        vector = np.asarray(embedding, dtype=np.float32)
        if str(pk) in cache:
            nearest = [tuple(cache[str(pk)])] if cache[str(pk)] else []
        else:
            # What that workspace's retrieve searches: its own lessons and the shared tier.
            base = retrieval.Filters(workspace=slug or "", scope="all").apply(Lesson.objects.all())
            nearest = retrieval.vector_branch(vector, base, 1, provider.model_id)
        nearest_of[str(pk)] = list(nearest[0]) if nearest else None
        best = float(nearest[0][1]) if nearest else -1.0
        if nearest and bool(retrieval.floor_passes(vector, [best], provider)[0]):
            answered[pk] = int(nearest[0][0])
            continue
        if slug not in domains:
            domains[slug] = _domain_vectors(slug, provider.model_id)
        corpus = domains[slug]
        domain = max(best, float(np.max(corpus @ _unit(vector))) if corpus is not None else -1.0)
        if nearest or corpus is not None:  # with nothing to compare against, it cannot be told
            if float(retrieval.background_similarity(vector, provider)[0]) >= domain:
                off.add(pk)
    return answered, off, nearest_of


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
    *, workspace: str = "", close: bool = False, nearest_cache: dict[str, Any] | None = None
) -> tuple[list[GapGroup], dict[str, Any]]:
    """The work ``refresh`` does: ``(groups, nearest)`` (``close``: first close the gaps a lesson would now
    be served for; ``nearest_cache`` and ``nearest``: see ``classify``)."""
    rows = Retrieval.objects.gaps()
    if workspace:
        rows = rows.filter(workspace=workspace)
    window = list(
        rows.order_by("-created_at", "-id").values_list(
            "id", "task", "agent", "workspace", "created_at", "embedding", "embedding_model"
        )[: settings.GAP_WINDOW]
    )
    answered, off, nearest = classify(window, nearest_cache)
    if close and answered:
        close_answered(answered)
    window = [row for row in window if row[0] not in answered]
    verdicts: dict[int, list[bool]] = {}
    groups: list[GapGroup] = []
    # The groups' head vectors by dimension, in the order the groups were made (first match wins).
    heads: dict[int, tuple[np.ndarray, list[int]]] = {}
    by_text: dict[str, GapGroup] = {}
    threshold = settings.GAP_GROUP_SIMILARITY
    for pk, task, agent, slug, created, embedding, model_id in window:
        vector = None if embedding is None else _unit(np.asarray(embedding, dtype=np.float32))
        group = None
        if vector is not None and vector.shape[0] in heads:
            matrix, owners = heads[vector.shape[0]]
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
                    vector.shape[0], (np.empty((len(window), vector.shape[0]), dtype=np.float32), [])
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
    # A lesson added, edited, embedded or archived may close a gap; a newly served task moves the domain.
    store = Lesson.objects.aggregate(n=Count("embedding"), changed=Max("updated_at"))
    served = Retrieval.objects.filter(gap=False).aggregate(last=Max("id"))
    window, threshold = settings.GAP_WINDOW, settings.GAP_GROUP_SIMILARITY
    changed = store["changed"].isoformat() if store["changed"] else None
    return [seen["n"], seen["last"], seen["embedded"], window, threshold, store["n"], changed, served["last"]]


def refresh(*, force: bool = False) -> int:
    """Group the open gaps into the maintained row (skipped while its inputs are unchanged); the number of
    groups. One refresh at a time across every process: while another holds the lock (a beat run that
    outlasts its interval, a ``refresh_soon`` beside it), this one returns the row's count at once rather
    than repeat the same work."""
    with _alone() as alone:
        if not alone:
            data = DerivedState.read(SNAPSHOT)
            return len(data.get("groups", [])) if data else 0
        inputs = _inputs()
        data = DerivedState.read(SNAPSHOT)
        if not force and data and data.get("inputs") == inputs:
            return len(data.get("groups", []))
        store = inputs[5:7]  # the lesson store's state: while it is unchanged, each gap's nearest lesson is too
        cache = data.get("nearest") if data and data.get("store") == store else None
        groups, nearest = _grouped(close=True, nearest_cache=cache)
        return _store(groups, nearest, store)


# The advisory lock ``refresh`` holds (a PostgreSQL session lock: a process that dies lets it go).
REFRESH_LOCK = int.from_bytes(hashlib.sha256(SNAPSHOT.encode()).digest()[:8], "big", signed=True)


@contextmanager
def _alone() -> Iterator[bool]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [REFRESH_LOCK])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [REFRESH_LOCK])


def _store(groups: list[GapGroup], nearest: dict[str, Any], store: list[Any]) -> int:
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
