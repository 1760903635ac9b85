"""Where a workspace's git work tree may live: an existing git work tree under an operator-set root.

The roots come from ``LESSONBOARD_WORKSPACE_ROOTS``; with none, no repository can be attached. Paths are
checked with symlinks resolved, at attach time and again at every use (the roots may have changed).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from django.conf import settings

from lessonboard.models import AuditEvent, Workspace
from lessons.reflect.engine import BOOTSTRAP_DIR
from lessons.reflect.git import GitRunner, HostileRepository


class RepositoryError(Exception):
    """A repository path or bootstrap folder that may not be used; the message says why."""


def allowed_roots() -> list[Path]:
    """The operator's roots, plus the demo's own folder (``DEMO_REPOSITORY_ROOT``) while it exists
    (``manage demo`` creates it and ``manage demo --remove`` deletes it)."""
    roots = [Path(os.path.realpath(root)) for root in settings.WORKSPACE_ROOTS]
    demo_root = Path(settings.DEMO_REPOSITORY_ROOT)
    if demo_root.is_dir():
        roots.append(Path(os.path.realpath(demo_root)))
    return roots


def is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_repository(raw: str) -> Path:
    """The resolved work tree for ``raw``, or ``RepositoryError``."""
    roots = allowed_roots()
    if not roots:
        raise RepositoryError(
            "no workspace roots are configured: set LESSONBOARD_WORKSPACE_ROOTS to the directories "
            "repositories may live under"
        )
    if not raw or not os.path.isabs(raw):
        raise RepositoryError(f"repository path must be absolute: {raw!r}")
    resolved = Path(os.path.realpath(raw))
    if not any(is_within(resolved, root) for root in roots):
        raise RepositoryError(f"repository path {raw} is outside the allowed roots (LESSONBOARD_WORKSPACE_ROOTS)")
    if not resolved.is_dir():
        raise RepositoryError(f"repository path does not exist or is not a directory: {raw}")
    runner = GitRunner.for_repo(resolved)
    if not runner.is_work_tree():
        raise RepositoryError(f"not a git work tree: {raw}")
    try:
        runner.refuse_hostile_config()
    except HostileRepository as exc:
        raise RepositoryError(str(exc)) from exc
    # A directory inside a larger work tree would let git read (and list) files above the roots.
    top = runner.top_level()
    if not top or not any(is_within(Path(os.path.realpath(top)), root) for root in roots):
        raise RepositoryError(f"the git work tree of {raw} starts outside the allowed roots: {top or '?'}")
    git_dirs = runner.git_dirs()
    if not git_dirs:
        raise RepositoryError(f"not a git work tree: {raw}")
    for git_dir in git_dirs:
        # A `.git` file ("gitdir: …") may point anywhere; git would read that directory's config and objects.
        if not any(is_within(Path(os.path.realpath(git_dir)), root) for root in roots):
            raise RepositoryError(f"the git directory of {raw} lies outside the allowed roots: {git_dir}")
    return resolved


_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")


def check_bootstrap_dir(raw: str) -> str:
    """A relative folder of plain segments (no ``..``, no absolute path), ``/``-joined without a trailing
    slash; empty means AIOSON's default."""
    stripped = (raw or "").strip()
    text = stripped.rstrip("/") or BOOTSTRAP_DIR
    segments = text.split("/")
    if os.path.isabs(stripped) or any(s in ("", ".", "..") or not _SEGMENT.match(s) for s in segments):
        raise RepositoryError(f"bootstrap folder must be a relative path inside the repository: {raw!r}")
    return "/".join(segments)


def attach_repository(
    workspace: Workspace,
    *,
    repo_path: str,
    bootstrap_dir: str | None = None,
    human_gate: bool | None = None,
    user: Any = None,
) -> Workspace:
    """Validate and store a workspace's repository settings; every change is audited."""
    resolved = check_repository(repo_path)
    workspace.repo_path = str(resolved)
    if bootstrap_dir is not None:
        workspace.reflect_bootstrap_dir = check_bootstrap_dir(bootstrap_dir)
    if human_gate is not None:
        workspace.reflect_human_gate = human_gate
    workspace.save(update_fields=["repo_path", "reflect_bootstrap_dir", "reflect_human_gate"])
    AuditEvent.record(
        "reflect.workspace.attach",
        user=user,
        object_type="workspace",
        object_ids=[workspace.pk],
        result={
            "repo_path": workspace.repo_path,
            "bootstrap_dir": workspace.reflect_bootstrap_dir,
            "human_gate": workspace.reflect_human_gate,
        },
    )
    return workspace


def workspace_repository(workspace: Workspace) -> Path:
    """The workspace's work tree, re-checked now; ``RepositoryError`` when none is attached or usable."""
    if not workspace.repo_path:
        raise RepositoryError(f"workspace {workspace.slug!r} has no repository attached")
    return check_repository(workspace.repo_path)
