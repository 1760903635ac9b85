"""git as a subprocess: an argument list (never a shell), a timeout and an output cap.

AIOSON runs git with a 4 MiB buffer and swallows **any** error as empty output (spec B.3); ``diff_*``
do the same, so a bad range, a young repository or a missing git all look like "no changes".
"""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from lessons.reflect.engine import Shortstat, parse_shortstat

# Repository config must not run programs on our behalf: an agent that can write the work tree may be
# able to write .git/config, so fsmonitor hooks, external diff drivers and textconv filters are off.
_SAFE_CONFIG = ("-c", "core.fsmonitor=false", "-c", "core.quotepath=off", "-c", "diff.external=")


class GitError(Exception):
    pass


@dataclass(frozen=True)
class GitRunner:
    """Runs ``git`` in one directory. ``timeout`` seconds and ``max_output`` bytes bound every call."""

    cwd: Path
    timeout: float
    max_output: int
    executable: str = "git"

    @classmethod
    def for_repo(cls, cwd: Path) -> GitRunner:
        return cls(cwd=cwd, timeout=settings.REFLECT_GIT_TIMEOUT, max_output=settings.REFLECT_GIT_MAX_OUTPUT)

    def run(self, *args: str) -> str:
        """stdout of ``git <args>``; ``GitError`` on a non-zero exit, a timeout or output over the cap."""
        env = {
            **os.environ,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",  # `git diff` may refresh the index; never take its lock for a read
            "LC_ALL": "C",
        }
        try:
            # A fixed executable and an argument list: no shell ever parses a range or a path.
            proc = subprocess.Popen(
                [self.executable, *_SAFE_CONFIG, *args],
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        except OSError as exc:
            raise GitError(f"cannot run git: {exc}") from exc
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(self.timeout, kill)
        timer.start()
        try:
            assert proc.stdout is not None
            data = proc.stdout.read(self.max_output + 1)
            if len(data) > self.max_output:
                proc.kill()
                proc.wait()
                raise GitError(f"git output larger than {self.max_output} bytes")
            code = proc.wait()
        finally:
            timer.cancel()
            if proc.stdout is not None:
                proc.stdout.close()
        if timed_out.is_set():
            raise GitError(f"git timed out after {self.timeout}s")
        if code != 0:
            raise GitError(f"git exited with {code}")
        return data.decode("utf-8", errors="replace")

    def quiet(self, *args: str) -> str:
        """AIOSON's ``runGit``: any error is empty output."""
        try:
            return self.run(*args)
        except GitError:
            return ""

    def is_work_tree(self) -> bool:
        return self.quiet("rev-parse", "--is-inside-work-tree").strip() == "true"

    def changed_files(self, git_range: str) -> list[str]:
        """``git diff --name-only <range>``, falling back to ``git diff --name-only HEAD`` when empty."""
        files = _lines(self.quiet("diff", "--no-ext-diff", "--name-only", "--end-of-options", git_range))
        if not files:
            files = _lines(self.quiet("diff", "--no-ext-diff", "--name-only", "HEAD"))
        return files

    def shortstat(self, git_range: str) -> Shortstat:
        """``git diff --shortstat <range>`` with the same fallback, run independently of the file list."""
        text = self.quiet("diff", "--no-ext-diff", "--no-textconv", "--shortstat", "--end-of-options", git_range)
        if not text.strip():
            text = self.quiet("diff", "--no-ext-diff", "--no-textconv", "--shortstat", "HEAD")
        return parse_shortstat(text)


def _lines(text: str) -> list[str]:
    return [line for line in (raw.strip() for raw in text.splitlines()) if line]
