"""Knowledge gaps: tasks for which no lesson applied, grouped so that twenty phrasings of one missing
lesson show as one row with a count.

Grouping is greedy and single-pass over the newest ``LESSONS_GAP_WINDOW`` open gaps, newest first: a task
joins the first group whose first (newest) task is at least ``LESSONS_GAP_GROUP_SIMILARITY`` cosine-similar,
else it starts a group. Tasks without a vector yet (the embed worker has not reached them, or no provider
is configured) fall back to grouping by identical text. O(window × groups) vector products in numpy: about
a millisecond per hundred gaps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlencode

import numpy as np
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from lessons.usage.models import Retrieval


@dataclass
class GapGroup:
    task: str  # the newest task of the group, shown as its title
    newest: datetime
    ids: list[int] = field(default_factory=list)
    agents: set[str] = field(default_factory=set)
    workspaces: set[str] = field(default_factory=set)
    examples: list[str] = field(default_factory=list)  # up to three other phrasings

    @property
    def count(self) -> int:
        return len(self.ids)

    @property
    def write_url(self) -> str:
        """The lesson list's "Write a lesson" form, prefilled with the group's task."""
        return reverse("lessons:search") + "?" + urlencode({"new": self.task[:2000]}) + "#new-lesson"


def open_gap_groups(*, workspace: str = "") -> list[GapGroup]:
    """The open gaps, grouped, biggest groups first (ties: newest first)."""
    rows = Retrieval.objects.gaps()
    if workspace:
        rows = rows.filter(workspace=workspace)
    window = list(
        rows.order_by("-created_at", "-id").values_list("id", "task", "agent", "workspace", "created_at", "embedding")[
            : settings.LESSONS_GAP_WINDOW
        ]
    )
    groups: list[GapGroup] = []
    heads: list[np.ndarray | None] = []
    by_text: dict[str, GapGroup] = {}
    threshold = settings.LESSONS_GAP_GROUP_SIMILARITY
    for pk, task, agent, slug, created, embedding in window:
        vector = None if embedding is None else _unit(np.asarray(embedding, dtype=np.float32))
        group = None
        if vector is not None:
            for candidate, head in zip(groups, heads, strict=True):
                if head is not None and head.shape == vector.shape and float(head @ vector) >= threshold:
                    group = candidate
                    break
        key = " ".join(task.lower().split())
        if group is None:
            group = by_text.get(key)
        if group is None:
            group = GapGroup(task=task, newest=created)
            groups.append(group)
            heads.append(vector)
            by_text[key] = group
        elif len(group.examples) < 3 and key != " ".join(group.task.lower().split()):
            group.examples.append(task)
        group.ids.append(pk)
        if agent:
            group.agents.add(agent)
        if slug:
            group.workspaces.add(slug)
    return sorted(groups, key=lambda g: (-g.count, -g.newest.timestamp()))


def dismiss(ids: list[int]) -> int:
    """Close these gaps (a person decided no lesson is needed); returns how many were open."""
    return Retrieval.objects.gaps().filter(pk__in=ids).update(gap_dismissed_at=timezone.now())


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector
