"""Impact preview on a pending lesson proposal: which logged tasks would get it, at what rank, and which
lesson it pushes out of their top five."""

from __future__ import annotations

from typing import Any

import pytest

from lessonboard.models import Workspace
from lessons import vectors
from lessons.review.staging import stage_lesson
from lessons.store import persist_lesson
from lessons.usage.log import embed_task
from tests.support.clients import ApiClient

pytestmark = pytest.mark.django_db

SQL = [
    ("adding a column to a large postgres table", "add it as nullable, backfill in batches"),
    ("creating an index on a busy postgres table", "use CREATE INDEX CONCURRENTLY"),
    ("renaming a postgres column in production", "add the new column, dual-write, then drop the old"),
    ("changing a postgres column type", "add a new column and migrate in batches"),
    ("dropping a postgres table", "rename it first and drop a week later"),
]


def test_it_lists_the_tasks_that_would_get_the_lesson_and_what_it_pushes_out(
    api: ApiClient, client_as: Any, bob: Any
) -> None:
    ids = [persist_lesson(situation=s, mistake="", correction=c, tags=[], trigger="manual").lesson.pk for s, c in SQL]
    vectors.embed_ids(ids)
    wanted = api.post(
        "/api/v1/lessons/retrieve", {"task": "lock timeout while running ALTER TABLE on postgres", "k": 5}
    )
    other = api.post("/api/v1/lessons/retrieve", {"task": "translate the onboarding emails to Portuguese", "k": 5})
    for response in (wanted, other):
        assert embed_task(response.json()["retrieval_id"])
    proposal = stage_lesson(
        Workspace.objects.for_slug("default"),
        situation="running ALTER TABLE on a big postgres table takes a lock and times out",
        mistake="ran ALTER TABLE directly during traffic",
        correction="set lock_timeout and run the ALTER TABLE in a maintenance window",
        tags=["postgres"],
        trigger="error",
        origin="test",
        summary="a lesson about locks",
        user=bob,
    )
    assert proposal is not None and proposal.status == "pending"

    fragment = client_as(bob).get(f"/lessons/impact/{proposal.pk}", headers={"HX-Request": "true"})
    html = fragment.content.decode()
    assert "<html" not in html
    assert "lock timeout while running ALTER TABLE on postgres" in html
    assert "translate the onboarding emails" not in html
    assert 'data-impact-rank="1"' in html
    assert "data-pushed-out=" in html  # five lessons were served: one of them drops out
    page = client_as(bob).get(f"/lessons/impact/{proposal.pk}")
    assert "<html" in page.content.decode() and 'id="impact"' in page.content.decode()
    assert 'id="impact-slot"' in client_as(bob).get(f"/reviews/{proposal.pk}/").content.decode()


def test_it_says_why_there_is_no_preview(client_as: Any, bob: Any, settings: Any) -> None:
    proposal = stage_lesson(
        Workspace.objects.for_slug("default"),
        situation="s",
        mistake="m",
        correction="c",
        tags=[],
        trigger="error",
        origin="test",
        summary="x",
        user=bob,
    )
    html = client_as(bob).get(f"/lessons/impact/{proposal.pk}").content.decode()
    assert "No recent retrieval has been logged with a task vector yet." in html
    settings.EMBEDDING_PROVIDER = "none"
    html = client_as(bob).get(f"/lessons/impact/{proposal.pk}").content.decode()
    assert "No embedding provider is configured" in html


def test_the_preview_counts_only_tasks_retrieval_would_serve_and_each_task_once(api: ApiClient, bob: Any) -> None:
    """docs/security.md#tenancy-and-the-gate: another workspace's tasks are not this lesson's to serve."""
    from lessons.usage import impact

    ids = [persist_lesson(situation=s, mistake="", correction=c, tags=[], trigger="manual").lesson.pk for s, c in SQL]
    vectors.embed_ids(ids)
    Workspace.objects.for_slug("tour")
    Workspace.objects.for_slug("other")
    task = "lock timeout while running ALTER TABLE on postgres"
    for slug in ("tour", "tour", "other"):
        response = api.post("/api/v1/lessons/retrieve", {"task": task, "k": 5, "workspace": slug})
        assert embed_task(response.json()["retrieval_id"])
    fields = {
        "situation": "running ALTER TABLE on a big postgres table takes a lock and times out",
        "mistake": "ran ALTER TABLE directly during traffic",
        "correction": "set lock_timeout and run the ALTER TABLE in a maintenance window",
        "tags": ["postgres"],
    }
    mine = impact.preview(**fields, workspace="tour")  # type: ignore[arg-type]
    assert [t.task for t in mine.tasks] == [task] and mine.considered == 1
    assert impact.preview(**fields, workspace="elsewhere").considered == 0  # type: ignore[arg-type]
