"""What the workspace page shows, read from the repository now: manifest, bootstrap files, proposals."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lessonboard.models import Workspace
from lessons.reflect import bootstrap
from lessons.reflect.engine import BOOTSTRAP_FILES, GENERATED_AT, MSG_SNAPSHOT_MISMATCH, strip_injection_chars, validate
from lessons.reflect.models import DocProposal
from lessons.reflect.repository import RepositoryError, workspace_repository


@dataclass
class BootstrapFile:
    name: str
    exists: bool
    content: str
    generated_at: str


@dataclass
class ProposalView:
    proposal: DocProposal
    diffs: list[dict[str, Any]]
    errors: list[str]
    stale: bool
    generated_at: list[tuple[str, str, str]]  # path, old value, new value
    sanitised: list[str]  # paths whose written text will differ from what the agent sent


@dataclass
class WorkspaceState:
    workspace: Workspace
    repo: Path | None = None
    repo_error: str = ""
    manifest: dict[str, Any] | None = None
    manifest_error: str = ""
    files: list[BootstrapFile] = field(default_factory=list)
    proposals: list[ProposalView] = field(default_factory=list)


def _generated_at(text: str) -> str:
    match = GENERATED_AT.search(text)
    return match.group(1) if match else ""


def workspace_state(workspace: Workspace) -> WorkspaceState:
    state = WorkspaceState(workspace=workspace)
    pending = list(DocProposal.objects.filter(workspace=workspace).pending().order_by("created_at", "id"))
    try:
        state.repo = workspace_repository(workspace)
    except RepositoryError as exc:
        state.repo_error = str(exc)
        state.proposals = [_view(p, {}, None) for p in pending]
        return state
    folder = workspace.reflect_bootstrap_dir
    try:
        snapshot = bootstrap.read_snapshot(state.repo, folder)
    except RepositoryError as exc:
        # Never show what a symlink leading out of the repository points at.
        state.repo_error = str(exc)
        state.proposals = [_view(p, {}, None) for p in pending]
        return state
    for name in BOOTSTRAP_FILES:
        exists = bootstrap.is_file(state.repo, f"{folder}/{name}")
        state.files.append(BootstrapFile(name, exists, snapshot[name], _generated_at(snapshot[name])))
    found, manifest = bootstrap.load_manifest(state.repo)
    if found and isinstance(manifest, dict):
        state.manifest = manifest
    elif found:
        state.manifest_error = "the manifest file is not a JSON object"
    state.proposals = [_view(p, snapshot, state.manifest) for p in pending]
    return state


def _view(proposal: DocProposal, snapshot: dict[str, str], on_disk: dict[str, Any] | None) -> ProposalView:
    checked = validate(manifest=proposal.manifest, files=proposal.files, current_snapshot=snapshot or None)
    errors = list(checked.errors)
    same_manifest = on_disk is not None and (
        on_disk.get("session_id"),
        on_disk.get("snapshot_hash"),
    ) == (proposal.manifest.get("session_id"), proposal.manifest.get("snapshot_hash"))
    if snapshot and not same_manifest:
        errors.append("the manifest on disk changed since this proposal (run prepare again)")
    original = proposal.manifest.get("current_bootstrap_snapshot") or {}
    generated = []
    sanitised = []
    for path, content in proposal.files.items():
        name = path.replace("\\", "/").rsplit("/", 1)[-1]
        generated.append((path, _generated_at(str(original.get(name) or "")), _generated_at(content)))
        if strip_injection_chars(content) != content:
            sanitised.append(path)
    return ProposalView(
        proposal=proposal,
        diffs=proposal.diffs(snapshot or dict(original)),
        errors=errors,
        stale=MSG_SNAPSHOT_MISMATCH in errors or (bool(snapshot) and not same_manifest),
        generated_at=generated,
        sanitised=sanitised,
    )
