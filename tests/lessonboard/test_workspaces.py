"""Who may name and create workspaces, strict slugs, and the paginated lists (docs/security.md#workspaces)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from lessonboard.models import AgentToken, AuditEvent, Workspace
from lessonboard.tokens import issue_token
from tests.factories import WorkspaceFactory
from tests.support.clients import ApiClient

pytestmark = pytest.mark.django_db

TRIGGERS = "/api/v1/reflexion/triggers"
LESSONS = "/api/v1/lessons"
RETRIEVE = "/api/v1/lessons/retrieve"


def trigger(workspace: str) -> dict[str, Any]:
    return {"task": "deploy", "error": "helm timed out", "agent": "coder", "workspace": workspace}


def client(scopes: list[str], **kwargs: Any) -> ApiClient:
    return ApiClient(issue_token("agent", scopes, **kwargs).plaintext)


@pytest.fixture(autouse=True)
def _queue(settings: Any, tmp_path: Path) -> None:
    """Ingest writes to this test's own WAL folder and node queue (no worker takes the messages)."""
    base = tmp_path / "lessonq"
    for sub in ("wal", "dlq", "quarantine", "expired"):
        (base / sub).mkdir(parents=True)
    settings.LESSONQ_BASE_DIR = base
    settings.NODE = "q3" + uuid.uuid4().hex[:8]
    settings.LESSONQ_QUEUE = f"lessonq.{settings.NODE}"


@pytest.mark.parametrize("slug", ["proj\n", "proj\r\n", "Proj", "-proj", "a" * 101])
def test_a_slug_with_a_trailing_newline_or_bad_characters_is_refused_everywhere(slug: str) -> None:
    full = client(["full"])
    for path, body in ((LESSONS, {"text": "x", "workspace": slug}), ("/api/v1/reviews", {"workspace": slug})):
        response = full.post(path, body)
        assert (response.status_code, response.json()["field"]) == (400, "workspace"), (path, slug)
    # Ingest too (docs/api.md): a newline is not forgiven as the spaces around a slug are.
    ingest = full.post(TRIGGERS, trigger(slug))
    assert (ingest.status_code, ingest.json()["field"]) == (400, "workspace")
    assert not Workspace.objects.exists()


def test_spaces_around_a_trigger_workspace_are_forgiven() -> None:
    assert client(["full"]).post(TRIGGERS, trigger("  proj ")).status_code == 202
    assert list(Workspace.objects.values_list("slug", flat=True)) == ["proj"]


def test_an_ingest_token_may_not_create_a_workspace_unless_allowed() -> None:
    WorkspaceFactory(slug="known")
    ingest = client(["ingest"])
    assert ingest.post(TRIGGERS, trigger("known")).status_code == 202
    refused = ingest.post(TRIGGERS, trigger("brand-new"))
    assert refused.status_code == 403 and refused.json()["field"] == "workspace"
    assert "may not create workspaces" in refused.json()["error"]
    assert not Workspace.objects.filter(slug="brand-new").exists()

    allowed = client(["ingest"], may_create_workspaces=True)
    assert allowed.post(TRIGGERS, trigger("brand-new")).status_code == 202
    created = Workspace.objects.get(slug="brand-new")
    event = AuditEvent.objects.get(action="workspace.create")
    assert event.object_ids == [str(created.pk)] and event.actor_token is not None


def test_a_full_token_creates_a_workspace_by_naming_it() -> None:
    assert client(["full"]).post(LESSONS, {"text": "Always pin versions.", "workspace": "fresh"}).status_code == 201
    assert Workspace.objects.filter(slug="fresh").exists()


def test_a_bound_token_names_only_its_workspaces() -> None:
    WorkspaceFactory(slug="mine")
    WorkspaceFactory(slug="theirs")
    bound = client(["full"], workspaces=["mine"])
    assert bound.post(LESSONS, {"text": "Mine.", "workspace": "mine"}).status_code == 201
    for path, body in (
        (LESSONS, {"text": "Theirs.", "workspace": "theirs"}),
        (TRIGGERS, trigger("theirs")),
        (RETRIEVE, {"task": "x", "workspace": "theirs"}),
        ("/api/v1/workspaces/theirs/reflect/prepare", {}),
        ("/api/v1/workspaces/theirs/reflect/commit", {"files": {}}),
        ("/api/v1/reviews", {"summary": "s", "workspace": "theirs"}),
        (LESSONS, {"text": "New.", "workspace": "another-new-one"}),
    ):
        response = bound.post(path, body)
        assert (response.status_code, response.json()["field"]) == (403, "workspace"), path
        assert "bound to workspace(s) mine" in response.json()["error"]
    assert bound.get("/api/v1/memory/memory", {"workspace": "theirs"}).status_code == 403
    everywhere = bound.post(RETRIEVE, {"task": "x"})
    assert (everywhere.status_code, everywhere.json()["field"]) == (400, "workspace")
    assert not Workspace.objects.filter(slug="another-new-one").exists()
    assert bound.get("/api/v1/workspaces").json()["workspaces"][0]["slug"] == "mine"
    assert len(bound.get("/api/v1/workspaces").json()["workspaces"]) == 1


def test_a_bound_token_reports_outcomes_only_for_its_own_workspaces_retrievals() -> None:
    """Retrieval ids are sequential: a bound token must not mark how another workspace's tasks went."""
    from lessons.usage.models import Retrieval

    WorkspaceFactory(slug="mine")
    WorkspaceFactory(slug="theirs")
    bound = client(["full"], workspaces=["mine"])
    theirs = client(["full"]).post(RETRIEVE, {"task": "deploy", "workspace": "theirs"}).json()["retrieval_id"]
    own = bound.post(RETRIEVE, {"task": "deploy", "workspace": "mine"}).json()["retrieval_id"]

    refused = bound.post("/api/v1/outcomes", {"retrieval_id": theirs, "success": False})
    assert (refused.status_code, refused.json()["field"]) == (403, "retrieval_id")
    by_trigger = bound.post(TRIGGERS, {**trigger("mine"), "retrieval_id": theirs})
    assert by_trigger.status_code == 202 and by_trigger.json()["outcome"].startswith(
        "not recorded: this token is bound"
    )
    assert Retrieval.objects.get(pk=theirs).success is None

    assert bound.post("/api/v1/outcomes", {"retrieval_id": own, "success": True}).status_code == 200
    assert Retrieval.objects.get(pk=own).success is True


def test_the_binding_survives_the_offline_token_copy() -> None:
    from lessonboard.tokens import authenticate, authenticate_offline

    issued = issue_token("bound", ["ingest"], workspaces=["mine"])
    authenticate(issued.plaintext)
    offline = authenticate_offline(issued.plaintext)
    assert offline is not None and offline.workspaces == ["mine"] and not offline.may_name("theirs")


def test_tokens_are_bound_from_the_command_line_and_the_admin(admin_user: Any, capsys: Any) -> None:
    call_command("create_agent_token", "ci", "--workspace", "proj-a", "--may-create-workspaces")
    token = AgentToken.objects.get(name="ci")
    assert (token.workspaces, token.may_create_workspaces) == (["proj-a"], True)

    from django.test import Client

    admin = Client()
    admin.force_login(admin_user)
    bad = admin.post(
        "/admin/lessonboard/agenttoken/add/", {"name": "x", "scopes": ["ingest"], "workspaces": '["Bad\\n"]'}
    )
    assert bad.status_code == 200 and "a list of workspace slugs" in bad.content.decode()
    ok = admin.post(
        "/admin/lessonboard/agenttoken/add/", {"name": "y", "scopes": ["ingest"], "workspaces": '["proj-b"]'}
    )
    assert ok.status_code == 302
    assert AgentToken.objects.get(name="y").workspaces == ["proj-b"]


def test_the_workspaces_page_and_api_are_paginated(client_as: Any, carol: Any) -> None:
    Workspace.objects.bulk_create([Workspace(slug=f"ws-{i:03d}", name="") for i in range(120)])
    page = client_as(carol)
    seen: list[str] = []
    url = "/workspaces/"
    for _ in range(5):
        html = page.get(url).content.decode()
        rows = re.findall(r'href="/workspaces/(ws-\d+)/"', html)
        assert len(rows) <= 50
        seen += rows
        more = re.search(r'href="\?after=([^"]+)" rel="next"', html)
        if not more:
            break
        url = f"/workspaces/?after={more.group(1)}"
    assert seen == [f"ws-{i:03d}" for i in range(120)]

    full = client(["full"])
    first = full.get("/api/v1/workspaces", {"limit": "100"}).json()
    assert len(first["workspaces"]) == 100 and first["next"] == "ws-099"
    rest = full.get("/api/v1/workspaces", {"limit": "100", "after": first["next"]}).json()
    assert [w["slug"] for w in rest["workspaces"]] == [f"ws-{i:03d}" for i in range(100, 120)]
    assert rest["next"] is None
    bad = full.get("/api/v1/workspaces", {"limit": "0"})
    assert (bad.status_code, bad.json()["field"]) == (400, "limit")
