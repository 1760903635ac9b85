"""The human gate for doc rewrites: a reviewer approves or rejects a staged ``DocProposal``.

Approval is not a bypass: it re-runs all eleven checks against the manifest the proposal was made for
and the bootstrap as it is *now* (a stale snapshot cannot be approved), then the path wall, then writes
exactly as a direct commit would. Rejection keeps the manifest so the agent can try again.
These two functions are the public surface for an approval queue listing ``DocProposal.objects.pending()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from lessonboard.models import AuditEvent, Workspace
from lessons.reflect import bootstrap
from lessons.reflect.commit import WriteFailed, path_escape, write_docs
from lessons.reflect.engine import MSG_SNAPSHOT_MISMATCH, validate
from lessons.reflect.models import DocProposal, DocProposalStatus, ReflectEvent, ReflectEventType
from lessons.reflect.repository import RepositoryError, workspace_repository

MANIFEST_CHANGED = "the manifest on disk is no longer the one this proposal was made for; run prepare again"


@dataclass
class Decision:
    ok: bool
    status: str
    message: str
    errors: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)


class ProposalNotPending(Exception):
    pass


def _lock(proposal: DocProposal) -> tuple[Workspace, DocProposal]:
    # Lock order: workspace, then proposal, the same as a direct commit (which locks the workspace).
    workspace = Workspace.objects.select_for_update().get(pk=proposal.workspace_id)
    locked = DocProposal.objects.select_for_update().get(pk=proposal.pk)
    if not locked.is_pending:
        raise ProposalNotPending(f"proposal #{locked.pk} is {locked.get_status_display()}, not pending")
    return workspace, locked


def approve_doc_proposal(proposal: DocProposal, *, user: Any, reason: str = "") -> Decision:
    """Re-check and write a pending proposal; a stale one becomes ``stale`` and nothing is written.

    Raises ``ProposalNotPending`` when it was already decided.
    """
    with transaction.atomic():
        workspace, proposal = _lock(proposal)
        try:
            repo = workspace_repository(workspace)
        except RepositoryError as exc:
            return _fail(proposal, workspace, user, DocProposalStatus.FAILED, str(exc), [str(exc)])
        found, on_disk = bootstrap.load_manifest(repo)
        if not found or not isinstance(on_disk, dict) or _identity(on_disk) != _identity(proposal.manifest):
            return _fail(proposal, workspace, user, DocProposalStatus.STALE, MANIFEST_CHANGED, [MANIFEST_CHANGED])
        try:
            snapshot = bootstrap.read_snapshot(repo, workspace.reflect_bootstrap_dir)
        except RepositoryError as exc:
            return _fail(proposal, workspace, user, DocProposalStatus.FAILED, str(exc), [str(exc)])
        checked = validate(manifest=proposal.manifest, files=proposal.files, current_snapshot=snapshot)
        if not checked.ok:
            status = DocProposalStatus.STALE if MSG_SNAPSHOT_MISMATCH in checked.errors else DocProposalStatus.FAILED
            ReflectEvent.record(
                workspace,
                ReflectEventType.FAILED,
                "validation failed",
                {"errors": checked.errors, "snapshot_hash": proposal.snapshot_hash, "proposal_id": proposal.pk},
                agent=proposal.agent,
            )
            return _fail(proposal, workspace, user, status, "; ".join(checked.errors), checked.errors)
        escape = path_escape(workspace, repo, proposal.files, agent=proposal.agent)
        if escape is not None:
            return _fail(proposal, workspace, user, DocProposalStatus.FAILED, escape["message"], [escape["message"]])
        try:
            written = write_docs(workspace, repo, proposal.files)
        except WriteFailed as exc:
            exc.result(workspace, agent=proposal.agent)
            return _fail(proposal, workspace, user, DocProposalStatus.FAILED, exc.message, [exc.message])
        proposal.decide(DocProposalStatus.APPLIED, user=user, reason=reason)
        ReflectEvent.record(
            workspace,
            ReflectEventType.COMMITTED,
            f"wrote {len(written)} bootstrap file(s)",
            {
                "files": written,
                "snapshot_hash": proposal.snapshot_hash,
                "targets": proposal.manifest.get("targets"),
                "proposal_id": proposal.pk,
                "approved_by": user.get_username(),
            },
            agent=proposal.agent,
        )
        AuditEvent.record(
            "reflect.proposal.approve",
            user=user,
            object_type="doc_proposal",
            object_ids=[proposal.pk],
            result={"status": proposal.status, "written": written},
            reason=reason,
        )
        return Decision(True, proposal.status, f"wrote {len(written)} bootstrap file(s)", written=written)


def reject_doc_proposal(proposal: DocProposal, *, user: Any, reason: str) -> Decision:
    """Reject with a (required) reason; nothing is written and the manifest stays for another try."""
    reason = (reason or "").strip()
    if not reason:
        raise ValueError("a reason is required to reject a proposal")
    with transaction.atomic():
        workspace, proposal = _lock(proposal)
        proposal.decide(DocProposalStatus.REJECTED, user=user, reason=reason)
        ReflectEvent.record(
            workspace,
            ReflectEventType.REJECTED,
            f"proposal #{proposal.pk} rejected",
            {"proposal_id": proposal.pk, "reason": reason, "rejected_by": user.get_username()},
            agent=proposal.agent,
        )
        AuditEvent.record(
            "reflect.proposal.reject",
            user=user,
            object_type="doc_proposal",
            object_ids=[proposal.pk],
            result={"status": proposal.status},
            reason=reason,
        )
        return Decision(True, proposal.status, f"proposal #{proposal.pk} rejected; the manifest is kept")


def _identity(manifest: dict[str, Any]) -> tuple[Any, Any]:
    return manifest.get("session_id"), manifest.get("snapshot_hash")


def _fail(
    proposal: DocProposal, workspace: Workspace, user: Any, status: str, message: str, errors: list[str]
) -> Decision:
    proposal.decide(status, user=user, error=message)
    AuditEvent.record(
        "reflect.proposal.approve",
        user=user,
        object_type="doc_proposal",
        object_ids=[proposal.pk],
        result={"status": status, "errors": errors},
    )
    return Decision(False, status, message, errors=errors)
