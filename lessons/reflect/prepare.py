"""``memory:reflect-prepare`` (docs/compat/aioson.md#prepare): evaluate the diff and, when relevant or forced, write the manifest."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from lessonboard.models import Workspace
from lessons.reflect import bootstrap
from lessons.reflect.engine import DEFAULT_GIT_RANGE, MANIFEST_PATH, build_manifest, evaluate
from lessons.reflect.git import GitRunner, HostileRepository
from lessons.reflect.models import (
    ReflectEvent,
    ReflectEventType,
    ReflectManifest,
    ReflectManifestStatus,
    jsonb_safe,
)
from lessons.reflect.repository import RepositoryError, workspace_repository


def prepare_reflection(
    *,
    workspace: Workspace,
    agent: str = "",
    git_range: str = "",
    force: bool = False,
    session_id: str = "",
    now: datetime | None = None,
) -> dict[str, Any]:
    """AIOSON's prepare, answering its ``--json`` result object.

    A missing bootstrap folder wins even over ``force``; a skip writes no manifest and leaves a pending
    one alone. Raises ``RepositoryError`` when the workspace has no usable repository.
    """
    repo = workspace_repository(workspace)
    agent = (agent or "").strip() or "unknown"
    git_range = git_range or DEFAULT_GIT_RANGE
    try:
        return _prepare(workspace, repo, agent=agent, git_range=git_range, force=force, session_id=session_id, now=now)
    except RepositoryError as exc:
        # A symlink leading out of the repository or a hostile git config: refused, and visible on the page.
        ReflectEvent.record(workspace, ReflectEventType.FAILED, str(exc), {"reason": "refused"}, agent=agent)
        raise


def _prepare(
    workspace: Workspace,
    repo: Path,
    *,
    agent: str,
    git_range: str,
    force: bool,
    session_id: str,
    now: datetime | None,
) -> dict[str, Any]:
    if not bootstrap.is_dir(repo, workspace.reflect_bootstrap_dir):
        message = f"bootstrap/ missing at {repo}/{workspace.reflect_bootstrap_dir} — run /discover to seed it."
        ReflectEvent.record(workspace, ReflectEventType.SKIPPED, message, {"reason": "missing_bootstrap"}, agent=agent)
        return {"ok": False, "skipped": True, "reason": "missing_bootstrap", "message": message}

    runner = GitRunner.for_repo(repo)
    try:
        changed, shortstat = runner.changed_files(git_range), runner.shortstat(git_range)
    except HostileRepository as exc:
        raise RepositoryError(str(exc)) from exc
    evaluation = evaluate(
        changed_files=changed, shortstat=shortstat, bootstrap_present=True, git_range=git_range, agent=agent
    )
    if not evaluation.relevant and not force:
        ReflectEvent.record(
            workspace,
            ReflectEventType.SKIPPED,
            "reflect skipped: no relevant signals in diff",
            {"reasons": evaluation.reasons, "shortstat": evaluation.shortstat.as_dict()},
            agent=agent,
        )
        return {"ok": True, "skipped": True, "evaluation": evaluation.as_dict()}

    manifest = build_manifest(
        evaluation=evaluation,
        snapshot=bootstrap.read_snapshot(repo, workspace.reflect_bootstrap_dir),
        now=now or timezone.now(),
        session_id=session_id or None,
        bootstrap_dir=workspace.reflect_bootstrap_dir,
    )
    forced = force and not evaluation.relevant
    with transaction.atomic():
        # The workspace's row lock, as a commit holds it: a manifest written while a commit runs would be
        # deleted from disk by that commit and its row marked consumed, and two prepares at once could leave
        # the newest row naming another manifest than the file.
        Workspace.objects.select_for_update().only("pk").get(pk=workspace.pk)
        try:
            path = bootstrap.write_manifest(repo, manifest)
        except OSError as exc:
            raise RepositoryError(f"cannot write the manifest {MANIFEST_PATH}: {exc.strerror or exc}") from exc
        ReflectManifest.objects.filter(workspace=workspace).pending().update(
            status=ReflectManifestStatus.SUPERSEDED, closed_at=timezone.now()
        )
        ReflectManifest.objects.create(
            workspace=workspace,
            session_id=manifest["session_id"],
            trigger_agent=agent,
            git_range=git_range,
            verdict=evaluation.verdict,
            forced=forced,
            targets=manifest["targets"],
            snapshot_hash=manifest["snapshot_hash"],
            data=jsonb_safe(manifest),
        )
        ReflectEvent.record(
            workspace,
            ReflectEventType.PREPARED,
            f"reflect manifest at {MANIFEST_PATH}",
            {
                "targets": manifest["targets"],
                "snapshot_hash": manifest["snapshot_hash"],
                "reasons": evaluation.reasons,
                "forced": forced,
            },
            agent=agent,
        )
    return {"ok": True, "manifest": manifest, "manifestPath": str(path), "evaluation": evaluation.as_dict()}
