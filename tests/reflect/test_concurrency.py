"""Two commits of one workspace at once: the row lock lets exactly one consume the manifest.

AIOSON records this race (no lock between reading and deleting the manifest) as a residual risk.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from lessons.reflect.commit import commit_reflection
from lessons.reflect.models import ReflectEvent
from lessons.reflect.prepare import prepare_reflection
from lessons.reflect.repository import attach_repository
from tests.factories import WorkspaceFactory
from tests.support.gitrepo import GitRepo

HOW = ".aioson/context/bootstrap/how-it-works.md"


@pytest.mark.django_db(transaction=True)
def test_two_simultaneous_commits_write_once(repo: GitRepo) -> None:
    repo.write("src/routes/users.js", "export {}\n")
    repo.git("add", "-A")
    ws = attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(repo.path))
    prepare_reflection(workspace=ws, agent="dev")
    base = repo.read(HOW).replace("2024-01-01T00:00:00Z", "2026-11-30T05:00:00Z")
    barrier = threading.Barrier(2)
    results: dict[str, dict[str, Any]] = {}

    def commit(name: str) -> None:
        try:
            barrier.wait()
            results[name] = commit_reflection(workspace=ws, files={HOW: base + f"written by {name}\n"}, agent=name)
        finally:
            connection.close()

    threads = [threading.Thread(target=commit, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    outcomes = sorted(r.get("error", "written") for r in results.values())
    assert outcomes == ["missing_manifest", "written"]
    winner = next(name for name, r in results.items() if r["ok"])
    assert repo.read(HOW).endswith(f"written by {winner}\n")
    assert ReflectEvent.objects.filter(event_type="memory_reflect_committed").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_prepare_during_a_commit_waits_for_it_and_its_manifest_survives(
    repo: GitRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prepare takes the workspace's row lock as a commit does: one that arrives while a commit writes
    waits for it, then writes a manifest the commit can no longer delete (it deleted the new manifest
    and marked its row consumed, so the next agent's commit found none)."""
    from lessons.reflect import commit as commit_module
    from lessons.reflect.engine import MANIFEST_PATH
    from lessons.reflect.models import ReflectManifest
    from tests.support.wait import wait_for

    repo.write("src/routes/users.js", "export {}\n")
    repo.git("add", "-A")
    ws = attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(repo.path))
    prepare_reflection(workspace=ws, agent="dev")
    base = repo.read(HOW).replace("2024-01-01T00:00:00Z", "2026-11-30T05:00:00Z")
    done: list[dict[str, Any]] = []

    def second_prepare() -> None:
        try:
            done.append(prepare_reflection(workspace=ws, agent="other", force=True))
        finally:
            connection.close()

    other = threading.Thread(target=second_prepare)
    write_docs = commit_module.write_docs

    def write_while_another_prepares(*args: Any, **kwargs: Any) -> Any:
        other.start()
        with connection.cursor() as cursor:  # it finishes, or waits on the lock this commit holds

            def prepared_or_waiting() -> bool:
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid()")
                return bool(done) or bool(cursor.fetchone()[0])

            wait_for(prepared_or_waiting, timeout=30, what="the second prepare to finish or wait")
        return write_docs(*args, **kwargs)

    monkeypatch.setattr(commit_module, "write_docs", write_while_another_prepares)
    assert commit_reflection(workspace=ws, files={HOW: base + "written\n"}, agent="dev")["ok"]
    other.join(timeout=60)
    assert done and done[0]["ok"]
    assert (repo.path / MANIFEST_PATH).exists()
    newest = ReflectManifest.objects.filter(workspace=ws).order_by("-pk").first()
    assert newest is not None and newest.trigger_agent == "other" and newest.status == "pending"
