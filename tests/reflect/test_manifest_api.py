"""Reading the pending manifest over the API, with the prompt templates of its targets; the templates alone."""

from __future__ import annotations

from typing import Any

import pytest

from lessonboard.models import Workspace
from lessons.reflect.prepare import prepare_reflection
from lessons.reflect.repository import attach_repository
from tests.factories import WorkspaceFactory
from tests.support.clients import ApiClient
from tests.support.gitrepo import GitRepo

pytestmark = pytest.mark.django_db


@pytest.fixture
def workspace(repo: GitRepo) -> Workspace:
    return attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(repo.path))


def test_it_serves_the_pending_manifest_with_its_targets_prompts(api: ApiClient, repo: GitRepo, workspace: Any) -> None:
    assert api.get("/api/v1/workspaces/proj/reflect/manifest").status_code == 404
    repo.write("src/routes/users.js", "export {}\n")
    repo.git("add", "src/routes/users.js")
    prepared = prepare_reflection(workspace=workspace, agent="dev", session_id="s-1")
    response = api.get("/api/v1/workspaces/proj/reflect/manifest")
    assert response.status_code == 200
    body = response.json()
    assert body["manifest"] == prepared["manifest"]
    assert body["snapshot_hash"] == prepared["manifest"]["snapshot_hash"]
    assert set(body["prompts"]) == {"how-it-works", "current-state"}  # the manifest's targets, no others
    assert "allowed_paths" in body["prompts"]["current-state"]
    assert api.get("/api/v1/workspaces/nowhere/reflect/manifest").status_code == 404


def test_it_serves_every_prompt_template(api: ApiClient) -> None:
    prompts = api.get("/api/v1/reflect/prompts").json()["prompts"]
    assert set(prompts) == {"current-state", "how-it-works", "what-it-does"}  # none for what-is, as AIOSON
    assert all(text.startswith("# Update ") for text in prompts.values())
