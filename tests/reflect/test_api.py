"""The reflect API: AIOSON's result objects over HTTP, with statuses and field-named errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lessonboard.models import Workspace
from lessons.reflect.engine import MANIFEST_PATH
from lessons.reflect.models import ReflectEvent
from lessons.reflect.repository import attach_repository
from tests.factories import WorkspaceFactory
from tests.support.gitrepo import GitRepo

pytestmark = pytest.mark.django_db

BOOT = ".aioson/context/bootstrap"
HOW = f"{BOOT}/how-it-works.md"
PREPARE = "/api/v1/workspaces/proj/reflect/prepare"
COMMIT = "/api/v1/workspaces/proj/reflect/commit"


@pytest.fixture
def workspace(repo: GitRepo) -> Workspace:
    repo.write("src/routes/users.js", "export {}\n")
    repo.git("add", "-A")
    return attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(repo.path))


def test_it_prepares_and_commits_over_the_api(api: Any, repo: GitRepo, workspace: Workspace) -> None:
    prepared = api.post(PREPARE, {"agent": "dev", "git_range": "HEAD~3..HEAD"})
    assert prepared.status_code == 200
    body = prepared.json()
    assert body["ok"] is True and body["manifest"]["targets"] == ["how-it-works.md", "current-state.md"]
    assert body["evaluation"]["changedFiles"] == ["src/routes/users.js"]
    assert json.loads(repo.read(MANIFEST_PATH)) == body["manifest"]

    new = repo.read(HOW).replace("2024-01-01T00:00:00Z", "2026-11-30T05:00:00Z") + "Users route.\n"
    dry = api.post(COMMIT, {"files": {HOW: new}, "dry_run": True})
    assert (dry.status_code, dry.json()) == (200, {"ok": True, "dryRun": True, "would_write": [HOW]})
    assert repo.exists(MANIFEST_PATH)

    committed = api.post(COMMIT, {"files": {HOW: new}, "agent": "dev"})
    assert committed.status_code == 200
    assert committed.json()["written"] == [HOW]
    assert repo.read(HOW) == new and not repo.exists(MANIFEST_PATH)

    again = api.post(COMMIT, {"files": {HOW: new}})
    assert again.status_code == 409 and again.json()["error"] == "missing_manifest"


def test_it_answers_a_skip_with_200_and_no_manifest(api: Any, repo: GitRepo, workspace: Workspace) -> None:
    repo.git("reset", "-q")  # unstage the route: nothing relevant left
    response = api.post(PREPARE, {})
    assert response.status_code == 200
    body = response.json()
    assert (body["ok"], body["skipped"], body["evaluation"]["verdict"]) == (True, True, "skip")
    assert not repo.exists(MANIFEST_PATH)


def test_it_answers_a_validation_failure_with_422(api: Any, repo: GitRepo, workspace: Workspace) -> None:
    assert api.post(PREPARE, {}).status_code == 200
    failed = api.post(COMMIT, {"files": {"src/evil.js": "x"}})
    assert failed.status_code == 422
    assert failed.json()["error"] == "validation_failed"
    assert "file outside allowed_paths: src/evil.js" in failed.json()["errors"]
    assert ReflectEvent.objects.filter(event_type="memory_reflect_failed").count() == 1
    assert not repo.exists("src/evil.js")


def test_it_answers_missing_bootstrap_with_409(api: Any, roots: Any) -> None:
    bare = GitRepo(roots / "bare")
    bare.commit("empty")
    attach_repository(WorkspaceFactory(slug="bare"), repo_path=str(bare.path))
    response = api.post("/api/v1/workspaces/bare/reflect/prepare", {"force": True})
    assert response.status_code == 409
    assert response.json()["reason"] == "missing_bootstrap"


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        (PREPARE, {"git_range": "--output=/tmp/x"}, 400, "git_range"),
        (PREPARE, {"git_range": 3}, 400, "git_range"),
        (PREPARE, {"force": "yes"}, 400, "force"),
        (PREPARE, {"agent": "a" * 201}, 400, "agent"),
        (PREPARE, {"session_id": "s\u0000"}, 400, "session_id"),
        (COMMIT, {"agent": "a\u0000"}, 400, "agent"),
        (COMMIT, {"files": {HOW: 12}}, 400, "files"),
        (COMMIT, {"files": {HOW: "a\u0000b"}}, 400, "files"),
        (COMMIT, {"files": {}, "dry_run": "no"}, 400, "dry_run"),
        ("/api/v1/workspaces/nope/reflect/prepare", {}, 404, "workspace"),
    ],
)
def test_it_names_the_bad_field(api: Any, workspace: Workspace, path: str, body: Any, status: int, field: str) -> None:
    response = api.post(path, body)
    assert response.status_code == status
    assert response.json()["field"] == field
    assert not ReflectEvent.objects.exists()


def test_it_refuses_a_workspace_without_a_repository(api: Any) -> None:
    WorkspaceFactory(slug="norepo")
    response = api.post("/api/v1/workspaces/norepo/reflect/prepare", {})
    assert response.status_code == 409
    assert response.json() == {"error": "workspace 'norepo' has no repository attached", "field": "workspace"}


def test_it_rejects_a_body_that_is_not_json(api: Any, workspace: Workspace) -> None:
    response = api.post(COMMIT, raw="{not json")
    assert response.status_code == 400 and response.json()["field"] == "body"


def test_it_needs_a_full_token(agent_token: Any, workspace: Workspace, client: Any) -> None:
    ingest = agent_token("ingest-only", "ingest")
    response = client.post(
        PREPARE, "{}", content_type="application/json", headers={"Authorization": f"Bearer {ingest}"}
    )
    assert response.status_code == 403
    assert client.post(PREPARE, "{}", content_type="application/json").status_code == 401
    assert not ReflectEvent.objects.exists()
