"""The full-text branch ranks its bounded candidates in one pass: best cover density first, at most
``depth`` rows, the filters applied inside the bound (lessons/retrieval.py ``text_branch``)."""

from __future__ import annotations

import pytest

from lessons import retrieval
from lessons.models import Lesson
from lessons.store import persist_lesson
from tests.factories import WorkspaceFactory

pytestmark = pytest.mark.django_db


def add(situation: str, correction: str, **kw) -> Lesson:
    return persist_lesson(
        situation=situation, mistake="it went wrong", correction=correction, tags=["t"], trigger="error", **kw
    ).lesson


def test_it_returns_the_best_cover_density_first_and_at_most_depth_rows() -> None:
    once_old = add("the nightly Go build stopped with ENOSPC", "delete old artefacts from the runner")
    twice = add("ENOSPC ENOSPC while the docker layers were written", "clean up ENOSPC sources first")
    once_new = add("postgres refused writes: ENOSPC on the data volume", "grow the volume before vacuum")
    rows = retrieval.text_branch("ENOSPC", Lesson.objects.active(), 20)
    assert [pk for pk, _ in rows] == [twice.pk, once_new.pk, once_old.pk]
    assert rows[0][1] > rows[1][1] and rows[1][1] >= rows[2][1]
    assert [pk for pk, _ in retrieval.text_branch("ENOSPC", Lesson.objects.active(), 1)] == [twice.pk]


def test_the_filters_narrow_the_candidates_before_the_bound(settings) -> None:
    ws = WorkspaceFactory(slug="alpha")
    for n in range(3):
        add(f"ENOSPC on runner {n} of the shared pool", f"prune runner {n}")
    scoped = add("ENOSPC on the alpha build box", "prune the alpha box", workspace=ws)
    settings.LESSONS_TEXT_CANDIDATES = 1
    base = retrieval.Filters(workspace="alpha").apply(Lesson.objects.all())
    assert [pk for pk, _ in retrieval.text_branch("ENOSPC", base, 20)] == [scoped.pk]
