"""Doc-reflection fixtures every folder uses (a pytest plugin, registered in tests/conftest.py): the only
allowed workspace root (``roots``) and a seeded repository under it (``repo``); ``HOW`` and ``new_how``
name and rewrite its how-it-works document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.gitrepo import GitRepo


@pytest.fixture
def roots(tmp_path: Path, settings: Any) -> Path:
    """``tmp_path/repos`` is the only allowed workspace root."""
    root = tmp_path / "repos"
    root.mkdir()
    settings.WORKSPACE_ROOTS = [root]
    return root


@pytest.fixture
def repo(roots: Path) -> GitRepo:
    """A repository with a seeded bootstrap in one commit (fewer than four: the range falls back)."""
    r = GitRepo(roots / "project")
    r.seed_bootstrap()
    r.write("README.md", "hello\n")
    r.commit("seed")
    return r


BOOT = ".aioson/context/bootstrap"
HOW = f"{BOOT}/how-it-works.md"


def new_how(repo: GitRepo, extra: str = "Users route.\n") -> str:
    return repo.read(HOW).replace("2024-01-01T00:00:00Z", "2026-11-30T05:00:00Z") + extra
