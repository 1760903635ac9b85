"""Knowledge gaps: tasks for which no lesson applied, grouped so that twenty phrasings of one missing
lesson show as one row with a count.

Grouping is greedy and single-pass over the newest ``GAP_WINDOW`` open gaps, newest first: a task
joins the first group whose first (newest) task is at least ``GAP_GROUP_SIMILARITY`` cosine-similar,
else it starts a group. Tasks without a vector yet (the embed worker has not reached them, or no provider
is configured) fall back to grouping by identical text. One matrix product per task over the groups'
heads (numpy).

The groups are a maintained view (docs/api.md#limits): ``refresh()`` computes them into a
``DerivedState`` row, run by beat (``LESSONBOARD_DERIVED_REFRESH_INTERVAL``) and soon after the embed
worker stores a gap's vector; ``dismiss`` takes the closed tasks out of the row at once. Pages read the
row (``open_gap_groups``) and never group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import numpy as np
from django.conf import settings
from django.db import transaction
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

    @property
    def count(self) -> int:
        return len(self.ids)

    @property
    def write_url(self) -> str:
        """The lesson list's "Write a lesson" form, prefilled with the group's task."""
        return reverse("lessons:search") + "?" + urlencode({"new": self.task[:2000]}) + "#new-lesson"


SNAPSHOT = "lessons.gap_groups"


def compute_gap_groups(*, workspace: str = "") -> list[GapGroup]:
    """The open gaps, grouped, biggest groups first (ties: newest first). The work ``refresh`` does."""
    rows = Retrieval.objects.gaps()
    if workspace:
        rows = rows.filter(workspace=workspace)
    window = list(
        rows.order_by("-created_at", "-id").values_list("id", "task", "agent", "workspace", "created_at", "embedding")[
            : settings.GAP_WINDOW
        ]
    )
    groups: list[GapGroup] = []
    # The groups' head vectors by dimension, in the order the groups were made (first match wins).
    heads: dict[int, tuple[np.ndarray, list[int]]] = {}
    by_text: dict[str, GapGroup] = {}
    threshold = settings.GAP_GROUP_SIMILARITY
    for pk, task, agent, slug, created, embedding in window:
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
        group.members.append(slug or "")
        if agent:
            group.agents.add(agent)
        if slug:
            group.workspaces.add(slug)
    return sorted(groups, key=lambda g: (-g.count, -g.newest.timestamp()))


def _dump(group: GapGroup) -> dict[str, Any]:
    return {
        "task": group.task,
        "newest": group.newest.isoformat(),
        "ids": group.ids,
        "members": group.members,
        "agents": sorted(group.agents),
        "examples": group.examples,
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
    )


def _inputs() -> list[Any]:
    """What the grouping depends on, cheaply: open gaps, the newest, how many have a vector, the settings."""
    seen = Retrieval.objects.gaps().aggregate(n=Count("id"), last=Max("id"), embedded=Count("embedding"))
    window, threshold = settings.GAP_WINDOW, settings.GAP_GROUP_SIMILARITY
    return [seen["n"], seen["last"], seen["embedded"], window, threshold]


def refresh(*, force: bool = False) -> int:
    """Group the open gaps into the maintained row (skipped while its inputs are unchanged); the number of
    groups."""
    inputs = _inputs()
    if not force:
        data = DerivedState.read(SNAPSHOT)
        if data and data.get("inputs") == inputs:
            return len(data.get("groups", []))
    groups = compute_gap_groups()
    DerivedState.write(SNAPSHOT, {"groups": [_dump(g) for g in groups], "inputs": inputs})
    return len(groups)


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


def maintained_at() -> datetime | None:
    return DerivedState.objects.filter(pk=SNAPSHOT).values_list("computed_at", flat=True).first()


def dismiss(ids: list[int]) -> int:
    """Close these gaps (a person decided no lesson is needed); returns how many were open. The maintained
    groups lose them at once."""
    with transaction.atomic():
        closed = Retrieval.objects.gaps().filter(pk__in=ids).update(gap_dismissed_at=timezone.now())
        row = DerivedState.objects.select_for_update().filter(pk=SNAPSHOT).first()
        if row is not None and closed:
            gone = set(ids)
            kept = []
            for raw in row.data.get("groups", []):
                members = raw.get("members") or [""] * len(raw["ids"])
                pairs = [(pk, slug) for pk, slug in zip(raw["ids"], members, strict=True) if pk not in gone]
                if pairs:
                    kept.append({**raw, "ids": [pk for pk, _ in pairs], "members": [slug for _, slug in pairs]})
            kept.sort(key=lambda g: (-len(g["ids"]), -datetime.fromisoformat(g["newest"]).timestamp()))
            row.data = {**row.data, "groups": kept}
            row.save(update_fields=["data"])
    return closed


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector
