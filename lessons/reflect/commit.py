"""``memory:reflect-commit`` (docs/compat/aioson.md#commit-checks): validate the agent's rewrite, then write it, stage it for a
reviewer (the workspace's human gate), or only report what it would write (dry run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from lessonboard.models import AgentToken, AuditEvent, Workspace
from lessons.reflect import bootstrap
from lessons.reflect.engine import MANIFEST_PATH, strip_injection_chars, validate
from lessons.reflect.models import (
    DocProposal,
    DocProposalStatus,
    ReflectEvent,
    ReflectEventType,
    ReflectManifest,
    ReflectManifestStatus,
    jsonb_safe,
)
from lessons.reflect.repository import RepositoryError, workspace_repository

MISSING_MANIFEST = (
    f"manifest not found at {MANIFEST_PATH} — it may have been consumed by a previous successful "
    "reflect-commit; run memory:reflect-prepare to generate a new one"
)
STAGED = "Staged for approval (the workspace's human gate is on). Not yet written — a reviewer decides."


def commit_reflection(
    *,
    workspace: Workspace,
    files: Any,
    agent: str = "",
    dry_run: bool = False,
    token: AgentToken | None = None,
) -> dict[str, Any]:
    """AIOSON's commit, answering its ``--json`` result object (plus ``pending`` for the human gate).

    Commits of one workspace run one at a time (a row lock on the workspace), closing AIOSON's
    documented TOCTOU race between two commits. Raises ``RepositoryError`` without a usable repository.
    """
    agent = (agent or "").strip() or "unknown"
    with transaction.atomic():
        workspace = Workspace.objects.select_for_update().get(pk=workspace.pk)
        repo = workspace_repository(workspace)
        found, manifest = bootstrap.load_manifest(repo)
        if not found:
            return {"ok": False, "error": "missing_manifest", "message": MISSING_MANIFEST}
        snapshot = bootstrap.read_snapshot(repo, workspace.reflect_bootstrap_dir)
        checked = validate(manifest=manifest, files=files, current_snapshot=snapshot)
        if not checked.ok:
            snapshot_hash = manifest.get("snapshot_hash") if isinstance(manifest, dict) else None
            ReflectEvent.record(
                workspace,
                ReflectEventType.FAILED,
                "validation failed",
                {"errors": checked.errors, "snapshot_hash": snapshot_hash},
                agent=agent,
            )
            return {"ok": False, "error": "validation_failed", "errors": checked.errors}
        escape = path_escape(workspace, repo, files, agent=agent)
        if escape is not None:
            return escape
        rel_paths = list(files)
        if dry_run:
            ReflectEvent.record(
                workspace,
                ReflectEventType.DRY_RUN,
                f"dry-run validated {len(rel_paths)} file(s)",
                {"would_write": rel_paths},
                agent=agent,
            )
            return {"ok": True, "dryRun": True, "would_write": rel_paths}
        if workspace.reflect_human_gate:
            return _stage(workspace, manifest, files, agent=agent, token=token)
        try:
            written = write_docs(workspace, repo, files)
        except WriteFailed as exc:
            return exc.result(workspace, agent=agent)
        ReflectEvent.record(
            workspace,
            ReflectEventType.COMMITTED,
            f"wrote {len(written)} bootstrap file(s)",
            {"files": written, "snapshot_hash": manifest.get("snapshot_hash"), "targets": manifest.get("targets")},
            agent=agent,
        )
        # Files written into a repository are a write like any other: on /audit/ too.
        AuditEvent.record(
            "reflect.commit",
            token=token,
            object_type="workspace",
            object_ids=[workspace.pk],
            result={"written": written, "agent": agent},
        )
        return {"ok": True, "written": written, "manifest": manifest}


def path_escape(workspace: Workspace, repo: Path, files: dict[str, Any], *, agent: str) -> dict[str, Any] | None:
    """The second wall (docs/compat/aioson.md#commit-checks step 5): every path must resolve under the bootstrap folder."""
    for rel in files:
        ok, resolved = bootstrap.contained_target(repo, workspace.reflect_bootstrap_dir, rel)
        if not ok:
            ReflectEvent.record(
                workspace,
                ReflectEventType.FAILED,
                f"refused write outside bootstrap/: {rel}",
                {"attempted_path": rel, "resolved": str(resolved)},
                agent=agent,
            )
            return {"ok": False, "error": "path_escape", "message": f"refused write outside bootstrap/: {rel}"}
    return None


class WriteFailed(Exception):
    """The disk refused a write (permissions, space); files before it are written, the manifest is kept."""

    def __init__(self, message: str, written: list[str]) -> None:
        super().__init__(message)
        self.message = message
        self.written = written

    def result(self, workspace: Workspace, *, agent: str) -> dict[str, Any]:
        ReflectEvent.record(
            workspace,
            ReflectEventType.FAILED,
            self.message,
            {"error": self.message, "written": self.written},
            agent=agent,
        )
        return {"ok": False, "error": "write_failed", "message": self.message, "written": self.written}


def write_docs(workspace: Workspace, repo: Path, files: dict[str, str]) -> list[str]:
    """Write the sanitised files in the payload's order, consume the manifest (single use).

    Raises ``WriteFailed`` when the disk refuses one; the manifest then stays for another try.
    """
    written: list[str] = []
    for rel, content in files.items():
        # The path wall ran before; the confined write checks again at the moment of writing.
        _, target = bootstrap.contained_target(repo, workspace.reflect_bootstrap_dir, rel)
        try:
            bootstrap.write_atomic(repo, target, strip_injection_chars(content))
        except (OSError, RepositoryError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise WriteFailed(f"could not write {rel}: {reason}", written) from exc
        written.append(rel)
    bootstrap.remove_manifest(repo)
    ReflectManifest.objects.filter(workspace=workspace).pending().update(
        status=ReflectManifestStatus.CONSUMED, closed_at=timezone.now()
    )
    return written


def manifest_record(workspace: Workspace, manifest: dict[str, Any]) -> ReflectManifest | None:
    """The row for the manifest on disk, when this server prepared it."""
    return (
        ReflectManifest.objects.filter(workspace=workspace, snapshot_hash=manifest.get("snapshot_hash"))
        .filter(session_id=str(manifest.get("session_id")))
        .first()
    )


def _stage(
    workspace: Workspace, manifest: dict[str, Any], files: dict[str, str], *, agent: str, token: AgentToken | None
) -> dict[str, Any]:
    # A newer rewrite replaces any older one still waiting: the reviewer sees the latest attempt only.
    older = list(DocProposal.objects.filter(workspace=workspace).pending())
    proposal = DocProposal.objects.create(
        workspace=workspace,
        manifest_record=manifest_record(workspace, manifest),
        manifest=jsonb_safe(manifest),
        files=files,
        validation={"ok": True, "errors": []},
        snapshot_hash=str(manifest.get("snapshot_hash") or ""),
        agent=agent,
        proposed_by_token=token,
    )
    for old in older:
        old.decide(DocProposalStatus.STALE, error=f"superseded by proposal #{proposal.pk}")
    rel_paths = list(files)
    ReflectEvent.record(
        workspace,
        ReflectEventType.PROPOSED,
        f"proposal #{proposal.pk} awaits review ({len(rel_paths)} file(s))",
        {"proposal_id": proposal.pk, "files": rel_paths, "snapshot_hash": proposal.snapshot_hash},
        agent=agent,
    )
    AuditEvent.record(
        "reflect.stage",
        token=token,
        object_type="doc_proposal",
        object_ids=[proposal.pk],
        result={"files": rel_paths, "agent": agent},
    )
    return {"ok": True, "pending": True, "proposal_id": proposal.pk, "would_write": rel_paths, "message": STAGED}


class BadInput(ValueError):
    """The agent's payload cannot be read; AIOSON answers ``{ok:false, error:'bad_input', message}``."""


def files_from_payload(payload: Any) -> dict[str, str] | Any:
    """``payload.files``, ``{}`` when absent (as AIOSON); every content must be a string.

    A ``files`` that is not an object is handed on unchanged so validation answers "no files to commit".
    """
    files = payload.get("files") if isinstance(payload, dict) else None
    if files is None:
        return {}
    if isinstance(files, dict):
        for path, content in files.items():
            if not isinstance(content, str):
                raise BadInput(f"file content must be a string: {path}")
            # Markdown never holds NUL; refusing it keeps the path wall and jsonb rows simple.
            if "\0" in path or "\0" in content:
                raise BadInput(f"file path or content contains a NUL character: {path!r}")
    return files


def bad_input(message: str) -> dict[str, Any]:
    return {"ok": False, "error": "bad_input", "message": message}
