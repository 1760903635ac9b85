"""Real git repositories in a temporary directory, for the reflect tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.test",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.test",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}

SEEDED = "---\nname: {name}\ngenerated_at: 2024-01-01T00:00:00Z\n---\n\n# {name}\n\nInitial text.\n"


class GitRepo:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=self.path, env={**os.environ, **GIT_ENV}, check=True, capture_output=True, text=True
        ).stdout

    def write(self, rel: str, text: str) -> Path:
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return target

    def commit(self, message: str = "change") -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)

    def seed_bootstrap(self, folder: str = ".aioson/context/bootstrap") -> None:
        for name in ("what-is.md", "how-it-works.md", "what-it-does.md", "current-state.md"):
            self.write(f"{folder}/{name}", SEEDED.format(name=name))

    def read(self, rel: str) -> str:
        return (self.path / rel).read_text(encoding="utf-8")

    def exists(self, rel: str) -> bool:
        return (self.path / rel).exists()
