"""Workspace pages and the human-gate actions: permissions in the view, effects on disk and rows."""

from __future__ import annotations

from typing import Any

import pytest

from lessonboard.models import Workspace
from lessons.reflect.commit import commit_reflection
from lessons.reflect.engine import MANIFEST_PATH
from lessons.reflect.models import DocProposal, DocProposalStatus
from lessons.reflect.prepare import prepare_reflection
from lessons.reflect.repository import attach_repository
from tests.factories import WorkspaceFactory
from tests.support.gitrepo import GitRepo

pytestmark = pytest.mark.django_db

BOOT = ".aioson/context/bootstrap"
HOW = f"{BOOT}/how-it-works.md"
PAGE = "/workspaces/proj/"


@pytest.fixture
def gated(repo: GitRepo) -> Workspace:
    repo.write("src/routes/users.js", "export {}\n")
    repo.git("add", "-A")
    ws = attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(repo.path), human_gate=True)
    prepare_reflection(workspace=ws, agent="dev")
    return ws


@pytest.fixture
def proposal(repo: GitRepo, gated: Workspace) -> DocProposal:
    text = repo.read(HOW).replace("2024-01-01T00:00:00Z", "2026-11-30T05:00:00Z") + "<script>alert(1)</script>\n"
    result = commit_reflection(workspace=gated, files={HOW: text}, agent="dev")
    return DocProposal.objects.get(pk=result["proposal_id"])


def test_it_sends_anonymous_users_to_login(client: Any, gated: Workspace) -> None:
    for url in ("/workspaces/", PAGE):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_it_lists_workspaces_and_links_them_from_the_overview(client_as: Any, carol: Any, gated: Workspace) -> None:
    client = client_as(carol)
    listing = client.get("/workspaces/").content.decode()
    assert 'href="/workspaces/proj/"' in listing
    assert 'href="/workspaces/"' in client.get("/").content.decode()


def test_the_page_shows_manifest_bootstrap_events_and_an_escaped_diff(
    client_as: Any, bob: Any, proposal: DocProposal
) -> None:
    page = client_as(bob).get(PAGE).content.decode()
    assert "routes/controllers touched (1 files)" in page
    assert "src/routes/users.js" in page
    assert "what-is.md" in page and "2024-01-01T00:00:00Z" in page
    assert "memory_reflect_prepared" in page and "memory_reflect_proposed" in page
    assert "+&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert f"/workspaces/proj/proposals/{proposal.pk}/approve" in page
    assert "all eleven checks pass" in page
    assert "disabled" not in page


def test_viewers_and_operators_see_no_review_buttons_and_cannot_post(
    client_as: Any, carol: Any, alice: Any, repo: GitRepo, proposal: DocProposal
) -> None:
    before = repo.read(HOW)
    for user in (carol, alice):
        client = client_as(user)
        assert "/approve" not in client.get(PAGE).content.decode()
        assert client.post(f"{PAGE}proposals/{proposal.pk}/approve").status_code == 403
        assert client.post(f"{PAGE}proposals/{proposal.pk}/reject", {"reason": "no"}).status_code == 403
    proposal.refresh_from_db()
    assert proposal.status == DocProposalStatus.PENDING and repo.read(HOW) == before


def test_a_reviewer_approves_from_the_page(client_as: Any, bob: Any, repo: GitRepo, proposal: DocProposal) -> None:
    client = client_as(bob)
    response = client.post(f"{PAGE}proposals/{proposal.pk}/approve", follow=True)
    assert "approved: wrote 1 bootstrap file(s)" in response.content.decode()
    assert "<script>alert(1)</script>" in repo.read(HOW)  # a doc may mention HTML; the page escapes it
    assert not repo.exists(MANIFEST_PATH)
    proposal.refresh_from_db()
    assert proposal.status == DocProposalStatus.APPLIED
    again = client.post(f"{PAGE}proposals/{proposal.pk}/approve", follow=True)
    assert "not pending" in again.content.decode()


def test_a_stale_proposal_shows_stale_and_a_forced_post_writes_nothing(
    client_as: Any, bob: Any, repo: GitRepo, proposal: DocProposal
) -> None:
    repo.write(f"{BOOT}/current-state.md", "---\ngenerated_at: 2026-02-02\n---\nhand edit\n")
    client = client_as(bob)
    page = client.get(PAGE).content.decode()
    assert "snapshot_hash mismatch: bootstrap changed between prepare and commit" in page
    assert "disabled" in page
    before = repo.read(HOW)
    response = client.post(f"{PAGE}proposals/{proposal.pk}/approve", follow=True)
    assert "could not be approved (stale)" in response.content.decode()
    assert repo.read(HOW) == before
    proposal.refresh_from_db()
    assert proposal.status == DocProposalStatus.STALE


def test_rejecting_needs_a_reason_and_keeps_the_manifest(
    client_as: Any, bob: Any, repo: GitRepo, proposal: DocProposal
) -> None:
    client = client_as(bob)
    response = client.post(f"{PAGE}proposals/{proposal.pk}/reject", {"reason": ""}, follow=True)
    assert "A reason is required" in response.content.decode()
    proposal.refresh_from_db()
    assert proposal.status == DocProposalStatus.PENDING
    client.post(f"{PAGE}proposals/{proposal.pk}/reject", {"reason": "wrong module"})
    proposal.refresh_from_db()
    assert (proposal.status, proposal.reason, proposal.decided_by) == ("rejected", "wrong module", bob)
    assert repo.exists(MANIFEST_PATH)
    page = client.get(PAGE).content.decode()
    assert "Rejected, by file: <code>how-it-works.md</code> 1" in page
    assert "wrong module" in page


def test_only_admins_change_repository_settings(
    client_as: Any, bob: Any, admin_user: Any, repo: GitRepo, roots: Any, gated: Workspace
) -> None:
    url = "/workspaces/proj/repository"
    data = {"repo_path": str(repo.path), "bootstrap_dir": BOOT}  # human_gate unticked: off
    assert client_as(bob).post(url, data).status_code == 403
    gated.refresh_from_db()
    assert gated.reflect_human_gate is True
    client = client_as(admin_user)
    bad = client.post(url, {**data, "repo_path": "/etc"}, follow=True)
    assert "outside the allowed roots" in bad.content.decode()
    client.post(url, data)
    gated.refresh_from_db()
    assert gated.reflect_human_gate is False


def test_the_events_partial_answers_htmx(client_as: Any, carol: Any, gated: Workspace) -> None:
    response = client_as(carol).get(PAGE, headers={"HX-Request": "true"})
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    assert 'id="events"' in body and "memory_reflect_prepared" in body


def test_a_workspace_without_repository_says_so(client_as: Any, carol: Any) -> None:
    WorkspaceFactory(slug="plain")
    page = client_as(carol).get("/workspaces/plain/").content.decode()
    assert "has no repository attached" in page
    assert client_as(carol).get("/workspaces/ghost/").status_code == 404


def test_the_admin_lists_reflect_rows_read_only(client_as: Any, admin_user: Any, proposal: DocProposal) -> None:
    client = client_as(admin_user)
    for model in ("reflectmanifest", "reflectevent", "docproposal"):
        assert client.get(f"/admin/lessons/{model}/").status_code == 200
    assert client.get("/admin/lessons/docproposal/add/").status_code == 403
