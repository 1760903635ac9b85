from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.reflect.gitrepo import GitRepo


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
