"""Knowledge gaps and the impact preview decide with the retrieval floor, per workspace
(docs/lessons.md#gaps): a gap closes when a lesson would now be served for it, off-domain tasks are told
apart, and the preview counts only tasks retrieval would serve the lesson."""

from __future__ import annotations

from typing import Any

import pytest

from lessonboard.models import Workspace
from lessons import retrieval, vectors
from lessons.store import persist_lesson, set_scope
from lessons.usage import gaps, impact
from lessons.usage.log import embed_task
from lessons.usage.models import Retrieval
from tests.support.clients import ApiClient

pytestmark = pytest.mark.django_db

CACHE = (
    "serving personalised responses behind a caching proxy or CDN",
    "one user's page was cached and served to other users",
    "mark per-user responses Cache-Control: private and set Vary",
)
RATE = ("bulk calls to the payments API", "no backoff after HTTP 429", "retry 429 with exponential backoff and jitter")
ON_TOPIC = "put the /me and /cart endpoints behind Cloudflare"
WEATHER = "What is the weather in Lisbon tomorrow?"
# Below the floor (no lesson applies) yet like the workspace's own tasks: a lesson is missing.
REAL_GAP = "translate the checkout page to German"


def lesson(slug: str, texts: tuple[str, str, str], tags: list[str]) -> Any:
    made = persist_lesson(
        situation=texts[0], mistake=texts[1], correction=texts[2], tags=tags, trigger="error",
        workspace=Workspace.objects.for_slug(slug),
    ).lesson  # fmt: skip
    vectors.embed_pending()
    retrieval.query_vectors().clear()
    return made


def ask(api: ApiClient, task: str, slug: str) -> int:
    response = api.post("/api/v1/lessons/retrieve", {"task": task, "workspace": slug})
    assert response.status_code == 200, response.content
    pk = response.json()["retrieval_id"]
    assert embed_task(pk)
    return pk


def open_tasks(slug: str) -> dict[str, bool]:
    gaps.refresh(force=True)
    return {group.task: group.off_domain for group in gaps.open_gap_groups(workspace=slug)}


def test_a_gap_closes_when_a_lesson_of_its_workspace_would_now_be_served(api: ApiClient) -> None:
    pk = ask(api, ON_TOPIC, "shop")  # shop has no lesson yet
    assert Retrieval.objects.get(pk=pk).gap is True
    assert ON_TOPIC in open_tasks("shop")
    lesson("billing", CACHE, ["cache"])  # another workspace's lesson is not served to shop's tasks
    assert ON_TOPIC in open_tasks("shop")
    answer = lesson("shop", CACHE, ["cache", "cdn"])
    assert ON_TOPIC not in open_tasks("shop")
    row = Retrieval.objects.get(pk=pk)
    assert row.gap_answered_by_id == answer.pk and row.gap_dismissed_at is not None
    # It is what a retrieve now does for that task.
    assert [
        h["id"] for h in api.post("/api/v1/lessons/retrieve", {"task": ON_TOPIC, "workspace": "shop"}).json()["lessons"]
    ][:1] == [answer.pk]


def test_a_shared_lesson_of_another_workspace_closes_the_gap_as_retrieve_serves_it(api: ApiClient) -> None:
    """docs/lessons.md#scopes: a workspace's retrieve searches its own lessons and the shared tier."""
    pk = ask(api, ON_TOPIC, "shop")
    theirs = lesson("billing", CACHE, ["cache"])
    assert ON_TOPIC in open_tasks("shop")
    set_scope(theirs, "shared", actor="test")
    assert ON_TOPIC not in open_tasks("shop")
    assert Retrieval.objects.get(pk=pk).gap_answered_by_id == theirs.pk
    served = api.post("/api/v1/lessons/retrieve", {"task": ON_TOPIC, "workspace": "shop"}).json()["lessons"]
    assert [h["id"] for h in served][:1] == [theirs.pk]


def test_an_off_domain_task_is_told_apart_from_a_real_gap(api: ApiClient, client_as: Any, carol: Any) -> None:
    lesson("shop", CACHE, ["cache", "cdn"])
    lesson("shop", RATE, ["rate-limit"])
    for task in ("cache the checkout page on the CDN", "retry the payments API after a 429"):
        ask(api, task, "shop")  # the workspace's domain: tasks it retrieved lessons for
    ask(api, WEATHER, "shop")
    ask(api, REAL_GAP, "shop")
    tasks = open_tasks("shop")
    assert tasks[WEATHER] is True
    assert tasks[REAL_GAP] is False
    html = client_as(carol).get("/lessons/gaps/", {"workspace": "shop"}).content.decode()
    off = html[html.index('id="off-domain"') :]
    assert WEATHER in off and REAL_GAP in html[: html.index('id="off-domain"')]


def test_the_preview_counts_a_task_only_above_the_retrieval_floor(api: ApiClient, settings: Any) -> None:
    lesson("tour", RATE, ["rate-limit"])
    ask(api, ON_TOPIC, "tour")
    fields = {"situation": CACHE[0], "mistake": CACHE[1], "correction": CACHE[2], "tags": ["cache"]}
    assert [t.task for t in impact.preview(**fields, workspace="tour").tasks] == [ON_TOPIC]  # type: ignore[arg-type]
    settings.RETRIEVAL_FLOOR_MARGIN = 0.9  # the floor retrieval uses, raised: nothing would be served
    assert impact.preview(**fields, workspace="tour").tasks == []  # type: ignore[arg-type]
    assert retrieval.search(ON_TOPIC, filters=retrieval.Filters(workspace="tour")).hits == []


def test_a_refresh_that_saw_only_new_gaps_searches_the_store_for_the_new_ones_only(
    api: ApiClient, monkeypatch: Any
) -> None:
    lesson("shop", CACHE, ["cache", "cdn"])
    ask(api, WEATHER, "shop")
    gaps.refresh(force=True)
    calls: list[int] = []
    search = retrieval.vector_branch

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return search(*args, **kwargs)

    monkeypatch.setattr(retrieval, "vector_branch", counted)
    ask(api, "write a birthday poem for my aunt", "shop")
    calls.clear()  # the retrieve itself searched
    gaps.refresh()
    assert calls == [1]  # the new gap only: the lesson store did not change
    lesson("shop", RATE, ["rate-limit"])
    calls.clear()
    gaps.refresh()
    assert calls == [1, 1]  # the store changed: both gaps are searched again
