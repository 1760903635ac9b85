"""Scopes (docs/lessons.md#scopes) and the memory API (docs/lessons.md#memory-api): a lesson belongs to a workspace
or to the shared tier; retrieve searches the caller's workspace plus the shared tier, each hit saying which;
every memory operation over the JSON API with a bound token's denials and the validation errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from lessonboard.models import AuditEvent
from lessonboard.tokens import issue_token
from lessons.interchange import export_memory_index
from lessons.models import Lesson
from lessons.store import persist_lesson
from tests.factories import WorkspaceFactory
from tests.support.clients import ApiClient

pytestmark = pytest.mark.django_db

RETRIEVE = "/api/v1/lessons/retrieve"
TASK = "rotate the kafka broker certificates"


@pytest.fixture(autouse=True)
def _lexical(settings: Any) -> None:
    settings.EMBEDDING_PROVIDER = "none"  # the full-text branch is enough to find these


def bound(slug: str) -> ApiClient:
    return ApiClient(issue_token(f"agent-{slug}", ["full"], workspaces=[slug]).plaintext)


def lesson_in(workspace: Any, correction: str, *, agent: str = "", situation: str = TASK) -> Lesson:
    return persist_lesson(
        situation=situation, mistake="", correction=correction, tags=[], trigger="manual", workspace=workspace,
        agent=agent,
    ).lesson  # fmt: skip


def ids(answer: Any) -> list[int]:
    assert answer.status_code == 200, answer.content[:300]
    return [hit["id"] for hit in answer.json()["lessons"]]


@pytest.fixture
def two() -> dict[str, Any]:
    a, b = WorkspaceFactory(slug="ws-a"), WorkspaceFactory(slug="ws-b")
    return {
        "a": lesson_in(a, "restart the brokers one at a time after swapping kafka certificates"),
        "b": lesson_in(b, "check the kafka truststore before rotating certificates"),
        "client_a": bound("ws-a"),
        "client_b": bound("ws-b"),
    }


def test_a_shared_lesson_is_found_from_every_workspace_and_each_hit_says_its_scope(two: dict[str, Any]) -> None:
    a, b, client_a, client_b = two["a"], two["b"], two["client_a"], two["client_b"]
    # Before sharing, each workspace finds only its own.
    assert ids(client_b.post(RETRIEVE, {"task": TASK, "workspace": "ws-b"})) == [b.pk]
    shared = client_a.post("/api/v1/lessons/scope", {"id": a.pk, "scope": "shared", "reason": "true for every team"})
    assert shared.status_code == 200, shared.content
    assert (shared.json()["changed"], shared.json()["lesson"]["scope"]) == (True, "shared")
    assert AuditEvent.objects.filter(action="lesson.share", object_ids=[str(a.pk)]).count() == 1
    assert a.versions.order_by("-number").first().action == "share"  # type: ignore[union-attr]

    answer = client_b.post(RETRIEVE, {"task": TASK, "workspace": "ws-b"})
    assert sorted(ids(answer)) == sorted([a.pk, b.pk])
    scopes = {hit["id"]: (hit["scope"], hit["workspace"]) for hit in answer.json()["lessons"]}
    assert scopes == {a.pk: ("shared", "ws-a"), b.pk: ("workspace", "ws-b")}
    block = answer.json()["memory_block"]
    assert block.startswith("## Long-term Memory\n- [lesson] LESSON: ")
    assert "\nSCOPE: shared" in block and "\nSCOPE: workspace ws-b" in block
    # Every item is still chatcli's "- [lesson] " item, its lines the content's and the SCOPE line.
    items = block.split("\n- [lesson] ")[1:]
    assert [item.splitlines()[-1].split(":")[0] for item in items] == ["SCOPE", "SCOPE"]
    # scope narrows it.
    assert ids(client_b.post(RETRIEVE, {"task": TASK, "workspace": "ws-b", "scope": "workspace"})) == [b.pk]
    assert ids(client_b.post(RETRIEVE, {"task": TASK, "workspace": "ws-b", "scope": "shared"})) == [a.pk]
    # A third workspace and an unbound token find the shared one too; a shared lesson reads from anywhere.
    WorkspaceFactory(slug="ws-c")
    assert ids(bound("ws-c").post(RETRIEVE, {"task": TASK, "workspace": "ws-c"})) == [a.pk]
    assert bound("ws-c").post("/api/v1/lessons/get", {"id": a.pk}).status_code == 200
    listed = client_b.post("/api/v1/lessons/list", {"workspace": "ws-b"}).json()["lessons"]
    assert sorted(lesson["id"] for lesson in listed) == sorted([a.pk, b.pk])

    # Only its own workspace may take it back: ws-b sees it but may not change it.
    refused = client_b.post("/api/v1/lessons/scope", {"id": a.pk, "scope": "workspace"})
    assert (refused.status_code, refused.json()["field"]) == (403, "id")
    assert client_b.post("/api/v1/lessons/delete", {"id": a.pk}).status_code == 403
    back = client_a.post("/api/v1/lessons/scope", {"id": a.pk, "scope": "workspace"})
    assert back.status_code == 200 and back.json()["lesson"]["scope"] == "workspace"
    assert AuditEvent.objects.filter(action="lesson.unshare", object_ids=[str(a.pk)]).exists()
    assert ids(client_b.post(RETRIEVE, {"task": TASK, "workspace": "ws-b"})) == [b.pk]
    again = client_a.post("/api/v1/lessons/scope", {"id": a.pk, "scope": "workspace"}).json()
    assert (again["changed"], again["version"]) == (False, None)


def test_a_bound_token_never_sees_another_workspaces_lesson(two: dict[str, Any]) -> None:
    b, client_a = two["b"], two["client_a"]
    assert b.pk not in ids(client_a.post(RETRIEVE, {"task": TASK, "workspace": "ws-a"}))
    assert b.pk not in ids(client_a.post(RETRIEVE, {"task": TASK, "workspace": "ws-a", "scope": "shared"}))
    listed = client_a.post("/api/v1/lessons/list", {"workspace": "ws-a", "status": "any"}).json()["lessons"]
    assert b.pk not in [lesson["id"] for lesson in listed]
    body = {"id": b.pk, "correction": "overwritten", "scope": "shared"}
    for path in ("get", "history", "update", "archive", "restore", "delete", "scope"):
        answer = client_a.post(f"/api/v1/lessons/{path}", body)
        # 404 exactly as for a lesson that does not exist: nothing tells that it does.
        missing = client_a.post(f"/api/v1/lessons/{path}", {**body, "id": 10**9})
        assert (answer.status_code, answer.json()) == (404, {**missing.json(), "error": f"no lesson {b.pk}"}), path
    b.refresh_from_db()
    assert (b.status, b.scope, b.versions.count()) == ("active", "workspace", 1)
    assert "overwritten" not in b.correction


def test_update_archive_restore_delete_and_history_over_the_api(api: ApiClient, tmp_path: Path) -> None:
    lesson = lesson_in(WorkspaceFactory(slug="shop"), "pin the kafka client version")
    old_fact = lesson.fact_id
    updated = api.post(
        "/api/v1/lessons/update",
        {"id": lesson.pk, "correction": "pin the kafka client to 3.7", "tags": ["Kafka"], "reason": "more exact"},
    )
    assert updated.status_code == 200, updated.content
    body = updated.json()
    assert (body["changed"], body["version"]) == (True, 2)
    assert body["lesson"]["correction"] == "pin the kafka client to 3.7" and body["lesson"]["tags"] == ["kafka"]
    assert (
        body["lesson"]["fact_id"] != old_fact and "CORRECTION: pin the kafka client to 3.7" in body["lesson"]["content"]
    )
    assert AuditEvent.objects.filter(action="lesson.edit", object_ids=[str(lesson.pk)]).exists()

    archived = api.post("/api/v1/lessons/archive", {"id": lesson.pk, "reason": "stale"}).json()
    assert (archived["lesson"]["status"], archived["version"]) == ("archived", 3)
    assert ids(api.post(RETRIEVE, {"task": TASK, "workspace": "shop"})) == []
    restored = api.post("/api/v1/lessons/restore", {"id": lesson.pk}).json()
    assert restored["lesson"]["status"] == "active"
    assert ids(api.post(RETRIEVE, {"task": TASK, "workspace": "shop"})) == [lesson.pk]

    deleted = api.post("/api/v1/lessons/delete", {"id": lesson.pk, "reason": "wrong"}).json()
    assert deleted["lesson"]["status"] == "deleted"
    assert AuditEvent.objects.filter(action="lesson.delete", object_ids=[str(lesson.pk)], reason="wrong").exists()
    assert ids(api.post(RETRIEVE, {"task": TASK, "workspace": "shop"})) == []
    listed = api.post("/api/v1/lessons/list", {"workspace": "shop", "status": "any"}).json()["lessons"]
    assert listed == []  # "any" is every status but the tombstones
    stones = api.post("/api/v1/lessons/list", {"workspace": "shop", "status": "deleted"}).json()["lessons"]
    assert [s["id"] for s in stones] == [lesson.pk]
    # chatcli's export tombstones it, so a running chatcli drops it too.
    export_memory_index(tmp_path / "memory_index.json")
    assert lesson.fact_id not in (tmp_path / "memory_index.json").read_text()
    tombstones = json.loads((tmp_path / "memory_tombstones.json").read_text())
    assert Lesson.objects.get(pk=lesson.pk).fact_id in tombstones
    conflict = api.post("/api/v1/lessons/update", {"id": lesson.pk, "correction": "x"})
    assert (conflict.status_code, conflict.json()["field"]) == (409, "id")
    assert api.post("/api/v1/lessons/archive", {"id": lesson.pk}).status_code == 409

    history = api.post("/api/v1/lessons/history", {"id": lesson.pk}).json()
    assert history["lesson_id"] == lesson.pk
    assert [v["action"] for v in history["versions"]] == ["delete", "restore", "archive", "edit", "create"]
    assert history["versions"][0]["reason"] == "wrong" and history["versions"][0]["actor"] == "token:test-agent"
    assert history["versions"][3]["snapshot"]["correction"] == "pin the kafka client to 3.7"
    # A tombstone is restored before it is shared: sharing it would show it to every workspace.
    shared = api.post("/api/v1/lessons/scope", {"id": lesson.pk, "scope": "shared"})
    assert (shared.status_code, shared.json()["field"]) == (409, "id")
    assert Lesson.objects.get(pk=lesson.pk).scope == "workspace"
    api.post("/api/v1/lessons/restore", {"id": lesson.pk})
    assert ids(api.post(RETRIEVE, {"task": TASK, "workspace": "shop"})) == [lesson.pk]


def test_an_update_that_changes_nothing_writes_no_version_and_says_so(api: ApiClient) -> None:
    lesson = lesson_in(WorkspaceFactory(slug="shop"), "pin the kafka client version")
    same = api.post("/api/v1/lessons/update", {"id": lesson.pk, "correction": lesson.correction, "tags": []})
    assert same.status_code == 200, same.content
    assert (same.json()["changed"], same.json()["version"]) == (False, None)
    assert lesson.versions.count() == 1
    assert not AuditEvent.objects.filter(action="lesson.edit").exists()
    # The language alone is a change, and a version records it (restoring that version brings it back).
    named = api.post("/api/v1/lessons/update", {"id": lesson.pk, "lang": "pt"}).json()
    assert (named["changed"], named["version"], named["lesson"]["lang"]) == (True, 2, "pt")
    assert lesson.versions.get(number=2).snapshot["lang"] == "pt"


def test_a_shared_lesson_does_not_name_its_workspaces_agent_or_job_to_another_workspace() -> None:
    a = WorkspaceFactory(slug="ws-a")
    WorkspaceFactory(slug="ws-b")
    lesson = persist_lesson(
        situation=TASK, mistake="", correction="restart the brokers one at a time", tags=[], trigger="error",
        workspace=a, agent="coder-a", source_job_id="job-a-1",
    ).lesson  # fmt: skip
    client_a, client_b = bound("ws-a"), bound("ws-b")
    client_a.post("/api/v1/lessons/scope", {"id": lesson.pk, "scope": "shared"})
    seen = [
        client_b.post(RETRIEVE, {"task": TASK, "workspace": "ws-b"}).json()["lessons"][0],
        client_b.post("/api/v1/lessons/get", {"id": lesson.pk}).json()["lesson"],
        client_b.post("/api/v1/lessons/list", {"workspace": "ws-b"}).json()["lessons"][0],
    ]
    assert [(one["id"], one["agent"], one["source_job_id"]) for one in seen] == [(lesson.pk, "", None)] * 3
    own = client_a.post("/api/v1/lessons/get", {"id": lesson.pk}).json()["lesson"]
    assert (own["agent"], own["source_job_id"]) == ("coder-a", "job-a-1")


def test_history_pages_from_the_newest_version_back(api: ApiClient) -> None:
    lesson = lesson_in(WorkspaceFactory(slug="shop"), "pin the kafka client version")
    for n in range(4):
        api.post("/api/v1/lessons/update", {"id": lesson.pk, "correction": f"pin the kafka client to 3.{n}"})
    numbers, before, pages = [], None, 0
    while True:
        body = {"id": lesson.pk, "limit": 2, **({"before": before} if before else {})}
        page = api.post("/api/v1/lessons/history", body).json()
        numbers += [v["number"] for v in page["versions"]]
        pages += 1
        before = page["next_before"]
        if before is None:
            break
    assert (numbers, pages) == ([5, 4, 3, 2, 1], 3)
    got = api.post("/api/v1/lessons/get", {"id": lesson.pk, "history": True}).json()
    assert ([v["number"] for v in got["versions"]], got["next_before"]) == ([5, 4, 3, 2, 1], None)
    bad = api.post("/api/v1/lessons/history", {"id": lesson.pk, "limit": 0})
    assert (bad.status_code, bad.json()["field"]) == (400, "limit")


def test_another_workspace_reads_a_shared_lessons_history_only_since_it_was_shared(two: dict[str, Any]) -> None:
    a, client_a, client_b = two["a"], two["client_a"], two["client_b"]
    client_a.post("/api/v1/lessons/update", {"id": a.pk, "correction": "internal: ask ops-oncall in #kafka-private"})
    client_a.post("/api/v1/lessons/update", {"id": a.pk, "correction": "restart the brokers one at a time"})
    client_a.post("/api/v1/lessons/scope", {"id": a.pk, "scope": "shared", "reason": "true for every team"})
    own = client_a.post("/api/v1/lessons/history", {"id": a.pk}).json()["versions"]
    assert [v["action"] for v in own] == ["share", "edit", "edit", "create"]
    assert own[0]["actor"] == "token:agent-ws-a"
    theirs = client_b.post("/api/v1/lessons/history", {"id": a.pk}).json()["versions"]
    assert [(v["action"], v["actor"]) for v in theirs] == [("share", "token")]
    assert "ops-oncall" not in json.dumps(theirs)
    got = client_b.post("/api/v1/lessons/get", {"id": a.pk, "history": True}).json()
    assert [v["number"] for v in got["versions"]] == [4]
    # Taken back and shared again: only what follows the second sharing.
    client_a.post("/api/v1/lessons/scope", {"id": a.pk, "scope": "workspace"})
    client_a.post("/api/v1/lessons/update", {"id": a.pk, "correction": "private again: ask ops-oncall"})
    client_a.post("/api/v1/lessons/scope", {"id": a.pk, "scope": "shared"})
    theirs = client_b.post("/api/v1/lessons/history", {"id": a.pk}).json()
    assert ([v["action"] for v in theirs["versions"]], theirs["next_before"]) == (["share"], None)
    paged = client_b.post("/api/v1/lessons/history", {"id": a.pk, "before": theirs["versions"][0]["number"]}).json()
    assert paged["versions"] == []  # older than the sharing: none of its business


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("update", {"id": 1}, "body"),
        ("update", {"id": 1, "situation": ""}, "situation"),
        ("update", {"id": 1, "confidence": 2}, "confidence"),
        ("update", {"id": 1, "trigger": "x" * 51}, "trigger"),
        ("update", {"id": 1, "lang": "klingon!"}, "lang"),
        ("update", {"id": "one", "correction": "c"}, "id"),
        ("archive", {"id": 0}, "id"),
        ("delete", {}, "id"),
        ("scope", {"id": 1, "scope": "team"}, "scope"),
        ("history", {"id": None}, "id"),
        ("list", {"cursor": "not-a-cursor"}, "cursor"),
        # base64 of "<time>|abc": decodes, but its id is not one (was a 500)
        ("list", {"cursor": "MjAyNC0wMS0wMVQwMDowMDowMCswMDowMHxhYmM"}, "cursor"),
        ("list", {"scope": "everything"}, "scope"),
        ("retrieve", {"task": "t", "scope": "team"}, "scope"),
        ("retrieve", {"task": "t", "agent_mode": "only"}, "agent"),
        ("retrieve", {"task": "t", "agent": "coder", "agent_mode": "boost"}, "agent_mode"),
    ],
)
def test_bad_memory_api_input_is_a_400_naming_the_field(api: ApiClient, path: str, body: Any, field: str) -> None:
    lesson = lesson_in(None, "anything at all")
    body = {key: lesson.pk if key == "id" and value == 1 else value for key, value in body.items()}
    before = list(Lesson.objects.values_list("content", "status", "scope"))
    answer = api.post(f"/api/v1/lessons/{path}", body)
    assert (answer.status_code, answer.json().get("field")) == (400, field), answer.content
    assert list(Lesson.objects.values_list("content", "status", "scope")) == before


def test_agent_mode_narrows_to_or_puts_first_the_same_agents_lessons(api: ApiClient) -> None:
    shop = WorkspaceFactory(slug="shop")
    theirs = lesson_in(shop, "rotate kafka broker certificates with the rolling script", agent="ops")
    mine = lesson_in(shop, "check the dates of the certificates", agent="coder", situation="certificates expiring")
    plain = api.post(RETRIEVE, {"task": TASK, "workspace": "shop", "agent": "coder"})
    assert ids(plain)[0] == theirs.pk  # recorded only: the better match first
    first = api.post(RETRIEVE, {"task": TASK, "workspace": "shop", "agent": "coder", "agent_mode": "first"})
    assert ids(first) == [mine.pk, theirs.pk] and first.json()["explanation"]["agent_first"] == "coder"
    only = api.post(RETRIEVE, {"task": TASK, "workspace": "shop", "agent": "coder", "agent_mode": "only"})
    assert ids(only) == [mine.pk]


def test_sharing_from_the_lesson_page_needs_the_permission_and_a_csrf_token(
    client_as: Any, bob: Any, carol: Any
) -> None:
    lesson = lesson_in(WorkspaceFactory(slug="shop"), "pin the chart version")
    url = f"/lessons/{lesson.pk}/scope"
    page = client_as(bob).get(f"/lessons/{lesson.pk}/").content.decode()
    assert f'action="{url}"' in page and "Share with every workspace" in page
    assert client_as(carol).post(url, {"scope": "shared"}).status_code == 403  # a viewer may only look
    checked = Client(enforce_csrf_checks=True)
    checked.force_login(bob)
    assert checked.post(url, {"scope": "shared"}).status_code == 403  # no CSRF token
    lesson.refresh_from_db()
    assert lesson.scope == "workspace"
    response = client_as(bob).post(url, {"scope": "shared", "reason": "every repo"})
    assert response.status_code == 302
    lesson.refresh_from_db()
    assert lesson.scope == "shared"
    event = AuditEvent.objects.get(action="lesson.share")
    assert (event.object_ids, event.reason, event.actor_user) == ([str(lesson.pk)], "every repo", bob)
    assert "shared with every workspace (from shop)" in client_as(bob).get(f"/lessons/{lesson.pk}/").content.decode()
    assert client_as(bob).post(url, {"scope": "team"}).status_code == 302
    lesson.refresh_from_db()
    assert lesson.scope == "shared"


# --- lessons drawn from a refine run or a dead job belong to the run's or the job's workspace ----------------
def test_a_lesson_from_a_refine_run_is_found_by_an_agent_retrieving_in_the_runs_workspace(bob: Any) -> None:
    from lessons.review.decisions import approve
    from refine.models import RefinePass, RefineRun
    from refine.runs import propose_lesson

    billing = WorkspaceFactory(slug="billing")
    run = RefineRun.objects.create(
        task="summarise the invoice dispute", original_draft="d", final_output="o", status="done", agent="writer",
        workspace=billing,
    )  # fmt: skip
    refine_pass = RefinePass.objects.create(
        run=run, number=1, revised="r", similarity_to_original=0.5, best_similarity=0.5, decision="accept"
    )
    proposal = propose_lesson(
        refine_pass,
        situation="summarising an invoice dispute",
        mistake="left out the disputed amount",
        correction="state the disputed invoice amount and its due date first",
        tags=["invoices"],
        user=bob,
    )
    assert proposal is not None and proposal.workspace.slug == "billing"  # not a workspace named "refine"
    approve(proposal.pk, bob)
    lesson = Lesson.objects.get(correction__startswith="state the disputed invoice amount")
    assert lesson.workspace.slug == "billing"  # type: ignore[union-attr]
    found = bound("billing").post(RETRIEVE, {"task": "summarise the invoice dispute", "workspace": "billing"})
    assert ids(found) == [lesson.pk]
    WorkspaceFactory(slug="shop")
    assert ids(bound("shop").post(RETRIEVE, {"task": "summarise the invoice dispute", "workspace": "shop"})) == []


def test_a_lesson_from_a_dead_job_is_found_by_an_agent_retrieving_in_the_jobs_workspace(bob: Any, jobs: Any) -> None:
    from lessonq.root_cause import draft_from_job, propose
    from lessons.review.decisions import approve

    shop = WorkspaceFactory(slug="shop")
    job = jobs(task="migrate the orders table", error="permanent: lock timeout after 30s", workspace=shop)
    draft = draft_from_job(job)
    draft.correction = "add the orders column as nullable and backfill it in batches"
    proposal = propose(draft, user=bob)
    assert proposal is not None and proposal.workspace.slug == "shop"  # not "default"
    approve(proposal.pk, bob)
    lesson = Lesson.objects.get(correction__startswith="add the orders column")
    assert lesson.workspace.slug == "shop"  # type: ignore[union-attr]
    assert ids(bound("shop").post(RETRIEVE, {"task": "migrate the orders table", "workspace": "shop"})) == [lesson.pk]


def test_the_migrations_move_a_refine_lesson_to_its_runs_workspace_and_write_the_move_in_its_history(bob: Any) -> None:
    import importlib

    from django.apps import apps

    from lessons.review.decisions import approve
    from lessons.review.staging import stage_lesson
    from refine.models import RefineRun

    billing, fallback = WorkspaceFactory(slug="billing"), WorkspaceFactory(slug="refine")
    run = RefineRun.objects.create(task="t", original_draft="d", final_output="o", status="done", workspace=billing)
    loose = RefineRun.objects.create(task="t", original_draft="d", final_output="o", status="done")
    staged = []
    for each, correction in ((run, "quote the invoice number"), (loose, "quote the order number")):
        # As the code before this change staged it: in the fallback workspace, whatever the run's.
        origin = f"refine run {each.pk} pass 1"
        staged.append(
            stage_lesson(
                fallback,
                situation="s",
                mistake="m",
                correction=correction,
                tags=[],
                trigger="low_quality",
                origin=origin,
                summary=f"Lesson proposed from {origin}.\n\nTask: t",
            )
        )
    for proposal in staged:
        approve(proposal.pk, bob)  # type: ignore[union-attr]
    migration = importlib.import_module("refine.migrations.0005_lessons_to_run_workspace")
    migration.forwards(apps, None)
    moved = Lesson.objects.get(correction="quote the invoice number")
    kept = Lesson.objects.get(correction="quote the order number")
    assert (moved.workspace, kept.workspace) == (billing, fallback)

    # lessons 0017 writes the move into the moved lesson's history, once, however often it runs.
    history = importlib.import_module("lessons.migrations.0017_move_version")
    before = {lesson.pk: list(lesson.versions.values_list("number", "action")) for lesson in (moved, kept)}
    for _ in range(2):
        history.forwards(apps, None)
    after = list(moved.versions.order_by("number").values_list("number", "action", "actor", "reason", "snapshot"))
    assert [row[:2] for row in after[:-1]] == sorted(before[moved.pk])
    number, action, actor, reason, snapshot = after[-1]
    assert (number, action, actor) == (len(before[moved.pk]) + 1, "move", "system")
    assert "from workspace refine to billing" in reason and "refine 0005" in reason
    # The fields a snapshot had when 0017 was written (a migration's frozen code; `lang` came later).
    assert snapshot == {key: value for key, value in moved.snapshot().items() if key != "lang"}
    assert list(kept.versions.values_list("number", "action")) == before[kept.pk]  # not moved: unchanged
