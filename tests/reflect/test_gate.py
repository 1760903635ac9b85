"""The human gate end to end: commit stages, a reviewer approves (re-checked) or rejects (manifest kept)."""

from __future__ import annotations

from typing import Any

import pytest

from lessonboard.models import AuditEvent, Workspace
from lessons.reflect.commit import commit_reflection
from lessons.reflect.engine import MANIFEST_PATH
from lessons.reflect.gate import ProposalNotPending, approve_doc_proposal, reject_doc_proposal
from lessons.reflect.models import DocProposal, DocProposalStatus, ReflectEvent, ReflectManifest
from lessons.reflect.prepare import prepare_reflection
from lessons.reflect.repository import attach_repository
from tests.factories import WorkspaceFactory
from tests.support.gitrepo import GitRepo
from tests.support.reflect import BOOT, HOW, new_how

pytestmark = pytest.mark.django_db


@pytest.fixture
def gated(repo: GitRepo) -> Workspace:
    repo.write("src/routes/users.js", "export {}\n")
    repo.git("add", "-A")
    ws = attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(repo.path), human_gate=True)
    prepare_reflection(workspace=ws, agent="dev")
    return ws


def stage(repo: GitRepo, ws: Workspace, text: str | None = None) -> DocProposal:
    result = commit_reflection(workspace=ws, files={HOW: text or new_how(repo)}, agent="dev")
    assert result["ok"] is True and result["pending"] is True
    return DocProposal.objects.get(pk=result["proposal_id"])


def test_a_gated_commit_stages_a_proposal_and_writes_nothing(repo: GitRepo, gated: Workspace) -> None:
    before = repo.read(HOW)
    proposal = stage(repo, gated)
    assert repo.read(HOW) == before
    assert repo.exists(MANIFEST_PATH)
    assert proposal.status == DocProposalStatus.PENDING
    assert proposal.reasons == ["routes/controllers touched (1 files)"]
    assert proposal.changed_files == ["src/routes/users.js"]
    assert proposal.manifest_record == ReflectManifest.objects.get(status="pending")
    diff = proposal.diffs({"how-it-works.md": before})[0]
    assert diff["path"] == HOW and "+Users route." in diff["lines"]
    assert "-generated_at: 2024-01-01T00:00:00Z" in diff["lines"]
    event = ReflectEvent.objects.get(event_type="memory_reflect_proposed")
    assert event.payload["proposal_id"] == proposal.pk


def test_a_gated_commit_is_still_validated(repo: GitRepo, gated: Workspace) -> None:
    result = commit_reflection(workspace=gated, files={HOW: repo.read(HOW)})
    assert result["error"] == "validation_failed"
    assert not DocProposal.objects.exists()


def test_approval_writes_sanitised_docs_and_consumes_the_manifest(repo: GitRepo, gated: Workspace, bob: Any) -> None:
    proposal = stage(repo, gated, new_how(repo, "Users\u200b route.<!-- psst -->\n"))
    decision = approve_doc_proposal(proposal, user=bob)
    assert (decision.ok, decision.status, decision.written) == (True, "applied", [HOW])
    assert repo.read(HOW).endswith("Users route.\n")
    assert not repo.exists(MANIFEST_PATH)
    proposal.refresh_from_db()
    assert (proposal.status, proposal.decided_by) == (DocProposalStatus.APPLIED, bob)
    committed = ReflectEvent.objects.get(event_type="memory_reflect_committed")
    assert committed.payload["proposal_id"] == proposal.pk and committed.payload["approved_by"] == "bob"
    audit = AuditEvent.objects.get(action="reflect.proposal.approve")
    assert (audit.actor_user, audit.object_ids, audit.result["status"]) == (bob, [str(proposal.pk)], "applied")
    with pytest.raises(ProposalNotPending):
        approve_doc_proposal(proposal, user=bob)


def test_a_stale_proposal_cannot_be_approved(repo: GitRepo, gated: Workspace, bob: Any) -> None:
    proposal = stage(repo, gated)
    repo.write(f"{BOOT}/what-is.md", "---\ngenerated_at: 2026-01-01\n---\nedited by a human\n")
    before = repo.read(HOW)
    decision = approve_doc_proposal(proposal, user=bob)
    assert (decision.ok, decision.status) == (False, "stale")
    assert decision.errors == ["snapshot_hash mismatch: bootstrap changed between prepare and commit"]
    assert repo.read(HOW) == before
    assert repo.exists(MANIFEST_PATH)
    proposal.refresh_from_db()
    assert proposal.status == DocProposalStatus.STALE and "snapshot_hash mismatch" in proposal.error
    assert AuditEvent.objects.get(action="reflect.proposal.approve").result["status"] == "stale"


def test_a_proposal_for_a_replaced_manifest_is_stale(repo: GitRepo, gated: Workspace, bob: Any) -> None:
    proposal = stage(repo, gated)
    prepare_reflection(workspace=gated, agent="dev", session_id="newer")
    decision = approve_doc_proposal(proposal, user=bob)
    assert decision.status == "stale" and "run prepare again" in decision.message
    assert "Users route." not in repo.read(HOW)


def test_a_newer_proposal_supersedes_the_pending_one(repo: GitRepo, gated: Workspace) -> None:
    first = stage(repo, gated)
    second = stage(repo, gated, new_how(repo, "Second try.\n"))
    first.refresh_from_db()
    assert first.status == DocProposalStatus.STALE and first.error == f"superseded by proposal #{second.pk}"
    assert list(DocProposal.objects.pending()) == [second]


def test_rejection_keeps_the_manifest_for_another_try(repo: GitRepo, gated: Workspace, bob: Any) -> None:
    proposal = stage(repo, gated)
    with pytest.raises(ValueError, match="reason is required"):
        reject_doc_proposal(proposal, user=bob, reason="  ")
    decision = reject_doc_proposal(proposal, user=bob, reason="invents a feature")
    assert decision.ok and decision.status == "rejected"
    assert repo.exists(MANIFEST_PATH)
    proposal.refresh_from_db()
    assert (proposal.status, proposal.reason) == (DocProposalStatus.REJECTED, "invents a feature")
    assert AuditEvent.objects.get(action="reflect.proposal.reject").reason == "invents a feature"
    retry = stage(repo, gated, new_how(repo, "Accurate text.\n"))
    assert approve_doc_proposal(retry, user=bob).ok
    assert "Accurate text." in repo.read(HOW)


def test_it_counts_decisions_per_agent_and_rejections_per_target(repo: GitRepo, gated: Workspace, bob: Any) -> None:
    reject_doc_proposal(stage(repo, gated), user=bob, reason="noise")
    approve_doc_proposal(stage(repo, gated, new_how(repo, "Good.\n")), user=bob)
    counts = DocProposal.objects.filter(workspace=gated).counts_by_agent()
    assert counts == [{"agent": "dev", "pending": 0, "applied": 1, "rejected": 1, "stale": 0, "failed": 0}]
    assert DocProposal.objects.rejections_by_target() == [("how-it-works.md", 1)]
