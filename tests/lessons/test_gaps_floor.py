"""Knowledge gaps and the impact preview decide with the retrieval floor, per workspace
(docs/lessons.md#gaps): a gap closes when a lesson would now be served for it, off-domain tasks are told
apart, and the preview counts only tasks retrieval would serve the lesson."""

from __future__ import annotations

from typing import Any

import pytest
import time_machine
from django.utils import timezone

from lessonboard.models import DerivedState, Workspace
from lessons import retrieval, vectors
from lessons.models import Lesson
from lessons.store import edit_lesson, persist_lesson, set_scope, set_status
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
I18N = (
    "translating the checkout page into another language",
    "the page's strings were hard-coded in the templates",
    "extract the strings into message catalogs and translate the catalog",
)


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


def test_a_task_the_software_classifier_vetoes_is_off_domain_and_no_lesson_closes_it(
    api: ApiClient, settings: Any
) -> None:
    settings.RETRIEVAL_FLOOR_SOFTWARE_MIN = 100.0  # every task scores below: retrieve answers each with nothing
    pk = ask(api, ON_TOPIC, "shop")
    assert Retrieval.objects.get(pk=pk).gap is True
    lesson("shop", CACHE, ["cache", "cdn"])  # the lesson that would close it ...
    assert open_tasks("shop") == {ON_TOPIC: True}  # ... does not: the task is off-domain
    assert Retrieval.objects.get(pk=pk).gap_answered_by_id is None
    settings.RETRIEVAL_FLOOR_SOFTWARE_MIN = -100.0  # the classifier off: the lesson closes it
    assert ON_TOPIC not in open_tasks("shop")


def test_the_preview_counts_a_task_only_above_the_retrieval_floor(api: ApiClient, settings: Any) -> None:
    lesson("tour", RATE, ["rate-limit"])
    ask(api, ON_TOPIC, "tour")
    fields = {"situation": CACHE[0], "mistake": CACHE[1], "correction": CACHE[2], "tags": ["cache"]}
    assert [t.task for t in impact.preview(**fields, workspace="tour").tasks] == [ON_TOPIC]  # type: ignore[arg-type]
    settings.RETRIEVAL_FLOOR_MARGIN = 0.9  # the floor retrieval uses, raised: nothing would be served
    assert impact.preview(**fields, workspace="tour").tasks == []  # type: ignore[arg-type]
    assert retrieval.search(ON_TOPIC, filters=retrieval.Filters(workspace="tour")).hits == []


def counted_searches(monkeypatch: Any) -> list[int]:
    """The nearest-lesson searches refresh runs from here on (``retrieval.vector_branch``, called through)."""
    calls: list[int] = []
    search = retrieval.vector_branch

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return search(*args, **kwargs)

    monkeypatch.setattr(retrieval, "vector_branch", counted)
    return calls


def kept_nearest() -> dict[str, Any]:
    """Each open gap's nearest lesson as the maintained row keeps it."""
    data = DerivedState.read(gaps.SNAPSHOT)
    assert data is not None
    return dict(data["nearest"])


def searched_afresh() -> dict[str, Any]:
    """Each open gap's nearest lesson as a search of the whole store finds it now (what a full pass does)."""
    return gaps._grouped()[1]


def test_a_refresh_that_saw_only_new_gaps_searches_the_store_for_the_new_ones_only(
    api: ApiClient, monkeypatch: Any
) -> None:
    lesson("shop", CACHE, ["cache", "cdn"])
    ask(api, WEATHER, "shop")
    gaps.refresh(force=True)
    calls = counted_searches(monkeypatch)
    ask(api, "write a birthday poem for my aunt", "shop")
    calls.clear()  # the retrieve itself searched
    gaps.refresh()
    assert calls == [1]  # the new gap only: the lesson store did not change


def same_nearest(kept: dict[str, Any], fresh: dict[str, Any]) -> bool:
    """The same lesson for every gap, at the same similarity (to float precision)."""
    if kept.keys() != fresh.keys():
        return False
    for key, entry in kept.items():
        other = fresh[key]
        if (entry is None) != (other is None):
            return False
        if entry is not None and (entry[0] != other[0] or abs(entry[1] - other[1]) > 1e-5):
            return False
    return True


def test_after_a_lesson_change_a_refresh_compares_the_gaps_with_the_changed_lessons_only(
    api: ApiClient, monkeypatch: Any
) -> None:
    """docs/lessons.md#gaps: a new or changed lesson is compared with every gap at once (exact cosine);
    only a gap whose nearest lesson changed or went is searched again, and the result is what a search of
    the whole store gives."""
    cache = lesson("shop", CACHE, ["cache", "cdn"])
    tasks = [ask(api, WEATHER, "shop"), ask(api, "write a birthday poem for my aunt", "shop")]
    gaps.refresh()
    assert {kept_nearest()[str(pk)][0] for pk in tasks} == {cache.pk}
    calls = counted_searches(monkeypatch)
    rate = lesson("shop", RATE, ["rate-limit"])  # a new lesson
    gaps.refresh()
    assert calls == []
    assert same_nearest(kept_nearest(), searched_afresh())
    on_cache = [pk for pk in tasks if kept_nearest()[str(pk)][0] == cache.pk]
    set_status(Lesson.objects.get(pk=cache.pk), "archived", actor="test")  # no longer what retrieve searches
    calls.clear()
    gaps.refresh()
    assert len(calls) == len(on_cache)  # those gaps only
    assert {kept_nearest()[str(pk)][0] for pk in tasks} == {rate.pk}
    assert same_nearest(kept_nearest(), searched_afresh())
    Lesson.objects.filter(pk=rate.pk).delete()  # gone from the table (the admin, say)
    calls.clear()
    gaps.refresh(force=True)  # the next refresh, whatever made it run
    assert len(calls) == len(tasks)
    assert kept_nearest() == searched_afresh() == {str(pk): None for pk in tasks}


def test_a_lesson_re_embedded_after_an_edit_closes_the_gap_it_now_answers(api: ApiClient) -> None:
    """An edit keeps the old vector until the embed worker has read the new text: the refresh after the edit
    still sees the old one, and the vector stored later (``embedded_at``, not ``updated_at``) is a change
    the next refresh acts on."""
    made = lesson("shop", RATE, ["rate-limit"])
    pk = ask(api, REAL_GAP, "shop")
    assert gaps.refresh() == 1
    edit_lesson(Lesson.objects.get(pk=made.pk), situation=I18N[0], mistake=I18N[1], correction=I18N[2], actor="t")
    assert gaps.refresh() == 1  # the edit is seen, but the vector is still the rate-limit one
    assert Retrieval.objects.get(pk=pk).gap_dismissed_at is None
    vectors.embed_ids([made.pk])
    assert gaps.refresh() == 0
    assert Retrieval.objects.get(pk=pk).gap_answered_by_id == made.pk


def test_a_full_pass_searches_every_gap_again_once_its_time_has_come(api: ApiClient, monkeypatch: Any) -> None:
    lesson("shop", CACHE, ["cache", "cdn"])
    ask(api, WEATHER, "shop")
    ask(api, "write a birthday poem for my aunt", "shop")
    gaps.refresh()
    calls = counted_searches(monkeypatch)
    lesson("shop", RATE, ["rate-limit"])
    gaps.refresh()
    assert calls == []
    with time_machine.travel(timezone.now() + gaps.FULL_PASS_EVERY):
        lesson("shop", ("a third lesson", "about nothing in particular", "kept short"), ["misc"])
        gaps.refresh()
        assert calls == [1, 1]
        calls.clear()
        lesson("shop", ("a fourth lesson", "about something else", "also short"), ["misc"])
        gaps.refresh()
        assert calls == []  # the full pass began the next hour's count


def test_past_the_incremental_bound_or_after_a_model_switch_every_gap_is_searched(
    api: ApiClient, monkeypatch: Any
) -> None:
    lesson("shop", CACHE, ["cache", "cdn"])
    ask(api, WEATHER, "shop")
    ask(api, "write a birthday poem for my aunt", "shop")
    gaps.refresh()
    calls = counted_searches(monkeypatch)
    monkeypatch.setattr(gaps, "INCREMENTAL_MAX", 1)  # a big import: more lessons changed than the bound
    lesson("shop", RATE, ["rate-limit"])
    lesson("shop", I18N, ["i18n"])
    gaps.refresh()
    assert calls == [1, 1]
    monkeypatch.setattr(gaps, "INCREMENTAL_MAX", 10_000)
    data = DerivedState.read(gaps.SNAPSHOT)
    assert data is not None
    DerivedState.write(gaps.SNAPSHOT, {**data, "store": {**data["store"], "model": "another-model"}})
    calls.clear()
    gaps.refresh(force=True)  # the kept nearest lessons were found with another model's vectors
    assert calls == [1, 1]
    calls.clear()
    gaps.refresh(force=True)
    assert calls == []
