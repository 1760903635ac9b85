"""In Chromium: a reviewer reads a staged doc rewrite's diff on the workspace page and approves it."""

from __future__ import annotations

from typing import Any

import pytest

from lessons.reflect.commit import commit_reflection
from lessons.reflect.engine import MANIFEST_PATH
from lessons.reflect.models import DocProposal, DocProposalStatus
from lessons.reflect.prepare import prepare_reflection
from lessons.reflect.repository import attach_repository
from tests.factories import UserFactory, WorkspaceFactory
from tests.support.gitrepo import GitRepo

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

HOW = ".aioson/context/bootstrap/how-it-works.md"


def test_a_reviewer_approves_a_doc_rewrite_in_the_browser(
    page: Any, live_server: Any, login: Any, repo: GitRepo
) -> None:
    UserFactory(username="bob", role="reviewer")
    repo.write("src/routes/users.js", "export {}\n")
    repo.git("add", "-A")
    ws = attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(repo.path), human_gate=True)
    prepare_reflection(workspace=ws, agent="dev")
    text = repo.read(HOW).replace("2024-01-01T00:00:00Z", "2026-11-30T05:00:00Z") + "Users route added.\n"
    result = commit_reflection(workspace=ws, files={HOW: text}, agent="dev")
    proposal = DocProposal.objects.get(pk=result["proposal_id"])

    login(page, "bob")
    page.goto(live_server.url + "/workspaces/")
    page.click("main a[href='/workspaces/proj/']")
    page.wait_for_url("**/workspaces/proj/")
    card = page.locator(f"#proposal-{proposal.pk}")
    assert card.locator(".diff .add", has_text="Users route added.").count() == 1
    assert card.locator(".diff .del", has_text="generated_at: 2024-01-01T00:00:00Z").count() == 1
    page.once("dialog", lambda dialog: dialog.accept())  # data-confirm asks first
    card.locator("button", has_text="Approve and write").click()
    page.wait_for_selector(".messages li.success")
    assert "approved: wrote 1 bootstrap file(s)" in page.locator(".messages").inner_text()
    assert page.locator("#proposals").inner_text().count("Nothing waits for review.") == 1
    proposal.refresh_from_db()
    assert proposal.status == DocProposalStatus.APPLIED
    assert repo.read(HOW) == text and not repo.exists(MANIFEST_PATH)
