"""Impact preview: before a reviewer approves a lesson, which recent tasks would now be served it, at what
rank, and which lessons it would push out of their top five.

It replays the logged retrievals against vectors only: for each of the newest
``LESSONBOARD_IMPACT_WINDOW`` retrievals whose task has a vector (same embedding model), the lessons it
served and the proposed lesson are ranked by cosine similarity to the task; the proposed lesson "would be
retrieved" where it ranks within the top ``TOP`` and clears the retrieval floor for that task
(``lessons.retrieval.floor_passes``: the same rule a retrieve applies, no threshold of its own). Only the
lesson's own workspace's tasks count, each task once. Hybrid retrieval also weighs full text and tags, so this is a preview of the vector side, said so
on the page. Cost: one embedding and a (window × served) matrix product in numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.conf import settings

from lessons import embeddings, retrieval
from lessons.lesson_vectors import embed_lessons
from lessons.models import Lesson
from lessons.usage.models import Retrieval, Served

TOP = 5


@dataclass
class TaskImpact:
    retrieval_id: int
    task: str
    agent: str
    at: datetime
    rank: int  # where the proposed lesson would land (1 = first)
    similarity: float
    pushed_out: Lesson | None  # the lesson that would drop out of the top five, if one does


@dataclass
class Impact:
    available: bool
    why_not: str = ""
    considered: int = 0
    tasks: list[TaskImpact] = field(default_factory=list)

    @property
    def pushed_out(self) -> dict[int, tuple[Lesson, int]]:
        """Lessons pushed out of a top five, with how many tasks they would drop from."""
        out: dict[int, tuple[Lesson, int]] = {}
        for item in self.tasks:
            if item.pushed_out is not None:
                lesson, n = out.get(item.pushed_out.pk, (item.pushed_out, 0))
                out[item.pushed_out.pk] = (lesson, n + 1)
        return out


def preview(*, situation: str, mistake: str, correction: str, tags: list[str], workspace: str | None = None) -> Impact:
    """``workspace``: the lesson's workspace slug — only tasks whose retrieve could serve it count: that
    workspace's, and those searched across every workspace (``""``, an unbound token naming none), never
    another workspace's (its retrieve serves only its own lessons); ``None`` keeps all (callers without
    one). A task asked several times counts once (its newest retrieval)."""
    provider = embeddings.provider()
    if provider is None:
        return Impact(False, "no embedding provider is configured, so recent tasks cannot be compared")
    logged = Retrieval.objects.filter(embedding__isnull=False, embedding_model=provider.model_id)
    if workspace is not None:
        logged = logged.filter(workspace__in=[workspace, ""])
    rows, seen = [], set()
    for row in logged.order_by("-created_at", "-id").values_list("id", "task", "agent", "created_at", "embedding")[
        : settings.IMPACT_WINDOW
    ]:
        key = " ".join(str(row[1]).lower().split())
        if key not in seen:  # the same task asked again is one task, not one per time it was asked
            seen.add(key)
            rows.append(row)
    if not rows:
        return Impact(False, "no recent retrieval has been logged with a task vector yet")
    draft = Lesson(situation=situation, mistake=mistake, correction=correction, tags=tags)
    vector = _unit(np.asarray(embed_lessons(provider, [draft])[0], dtype=np.float32))
    tasks = np.stack([_unit(np.asarray(row[4], dtype=np.float32)) for row in rows])
    proposed = tasks @ vector
    served: dict[int, list[int]] = {}
    for retrieval_id, lesson_id in Served.objects.filter(retrieval_id__in=[r[0] for r in rows]).values_list(
        "retrieval_id", "lesson_id"
    ):
        served.setdefault(retrieval_id, []).append(lesson_id)
    lesson_ids = {pk for ids in served.values() for pk in ids}
    lessons = Lesson.objects.filter(pk__in=lesson_ids, embedding_model=provider.model_id).in_bulk()
    lesson_vectors = {pk: _unit(np.asarray(lesson.embedding, dtype=np.float32)) for pk, lesson in lessons.items()}
    impact = Impact(True, considered=len(rows))
    served_above_floor = retrieval.floor_passes(tasks, proposed, provider)
    for index, (retrieval_id, task, agent, at, _) in enumerate(rows):
        similarity = float(proposed[index])
        if not served_above_floor[index]:
            continue  # retrieval's floor: nothing this close would be served for that task
        others = sorted(
            (
                (float(lesson_vectors[pk] @ tasks[index]), pk)
                for pk in served.get(retrieval_id, [])
                if pk in lesson_vectors
            ),
            reverse=True,
        )
        rank = 1 + sum(1 for score, _ in others if score > similarity)
        if rank > TOP:
            continue
        pushed = lessons[others[TOP - 1][1]] if len(others) >= TOP else None
        impact.tasks.append(TaskImpact(retrieval_id, task, agent, at, rank, similarity, pushed))
    impact.tasks.sort(key=lambda item: (item.rank, -item.similarity))
    return impact


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector
