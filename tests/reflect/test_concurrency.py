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
