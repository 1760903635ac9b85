"""git as a subprocess: an argument list (never a shell), a timeout and an output cap.

AIOSON runs git with a 4 MiB buffer and swallows **any** error as empty output (docs/compat/aioson.md#git-range); ``diff_*``
do the same, so a bad range, a young repository or a missing git all look like "no changes".

An attached repository is not trusted: whoever can write to it can write its ``.git/config``, and git
config can name programs (filter drivers, textconv, fsmonitor, hooks, ssh, pagers). So git runs with no
system or global config, a scrubbed environment and overrides for the keys that have a safe value, and a
repository whose own config names a program is refused before any command that could run one
(``hostile_config``; docs/security.md#hostile-repositories).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from lessons.reflect.engine import Shortstat, parse_shortstat

# Repository config must not run programs on our behalf: an agent that can write the work tree may be
# able to write .git/config. Command-line config wins over the repository's, so every key that has a safe
# value is pinned here; the keys that cannot be pinned (a filter driver has any name) are refused by
# ``hostile_config``. No transport is allowed: reflection never talks to a remote.
_SAFE_CONFIG = (
    *("-c", "core.fsmonitor=false"),
    *("-c", "core.quotepath=off"),
    *("-c", "diff.external="),
    *("-c", f"core.hooksPath={os.devnull}"),
    *("-c", f"core.attributesFile={os.devnull}"),
    *("-c", "core.pager=cat"),
    *("-c", "core.sshCommand=false"),
    *("-c", "protocol.allow=never"),
)

# Keys of the repository's own config that name a program git might run, or a file outside the
# repository it would read. Lower-cased as git prints them (section and variable; subsections keep case).
HOSTILE_KEY = re.compile(
    r"""^(?:
        filter\..*                                  # clean/smudge/process drivers (any name, via attributes)
      | include\..* | includeif\..*                # config from another file
      | core\.(?:fsmonitor|hookspath|sshcommand|pager|editor|askpass|gitproxy|worktree|attributesfile
               |alternaterefscommand|excludesfile)
      | diff\.external | diff\.orderfile | pager\..*
      | .*\.(?:textconv|command|cmd|program|helper|driver|editor|askpass|packobjectshook|uploadpack|receivepack)
    )$""",
    re.IGNORECASE | re.VERBOSE,
)
_FALSE = {"false", "no", "off", "0", ""}

# Nothing of the server's own git environment (GIT_DIR, GIT_CONFIG_PARAMETERS, GIT_EXTERNAL_DIFF,
# GIT_SSH_COMMAND, …) reaches the child; system and global config are not read at all.
_DROPPED_ENV = ("SSH_ASKPASS", "PAGER", "EDITOR", "VISUAL")


def git_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k not in _DROPPED_ENV}
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "GIT_OPTIONAL_LOCKS": "0",  # `git diff` may refresh the index; never take its lock for a read
            "LC_ALL": "C",
        }
    )
    return env


class GitError(Exception):
    pass


class HostileRepository(Exception):
    """The repository's config names programs git would run as the server user; nothing was run."""

    def __init__(self, entries: list[str]) -> None:
        self.entries = entries
        keys = ", ".join(sorted({entry.split("=", 1)[0] for entry in entries}))
        super().__init__(
            f"refused: the repository's git config sets {keys}, which would make git run a program or read "
            "outside the repository on the server; remove these keys (git config --unset) to attach it"
        )


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
        # The operator chose the directory (it lies under LESSONBOARD_WORKSPACE_ROOTS), so git may open it
        # whoever owns it; safe.directory's guard against hostile config is ``hostile_config`` here.
        safe = ("-c", f"safe.directory={self.cwd}")
        try:
            # A fixed executable and an argument list: no shell ever parses a range or a path.
            proc = subprocess.Popen(
                [self.executable, *_SAFE_CONFIG, *safe, *args],
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=git_environment(),
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

    def top_level(self) -> str:
        return self.quiet("rev-parse", "--show-toplevel").strip()

    def git_dirs(self) -> list[str]:
        """The repository's git directory and common directory (they differ for a linked work tree)."""
        return _lines(self.quiet("rev-parse", "--absolute-git-dir", "--path-format=absolute", "--git-common-dir"))

    def hostile_config(self) -> list[str]:
        """``key=value`` of every repository (or work-tree) config entry that could make git run a program
        or read outside the repository; reading config runs nothing (``--no-includes``)."""
        text = self.run("config", "--list", "--show-scope", "--no-includes", "-z")
        fields = text.split("\0")
        found = []
        for scope, entry in zip(fields[0::2], fields[1::2], strict=False):
            if scope == "command":  # our own overrides
                continue
            key, _, value = entry.partition("\n")
            if not HOSTILE_KEY.match(key):
                continue
            if key.lower() == "core.fsmonitor" and value.strip().lower() in _FALSE:
                continue
            found.append(f"{key}={value}")
        return found

    def refuse_hostile_config(self) -> None:
        """``HostileRepository`` when the repository's config names a program; checked right before every
        command that reads the work tree (where filters run), so a config written after attach is caught."""
        try:
            found = self.hostile_config()
        except GitError:
            return  # not a repository (or no git): the diff itself finds nothing either
        if found:
            raise HostileRepository(found)

    def changed_files(self, git_range: str) -> list[str]:
        """``git diff --name-only <range>``, falling back to ``git diff --name-only HEAD`` when empty."""
        self.refuse_hostile_config()
        files = _lines(
            self.quiet("diff", "--no-ext-diff", "--no-textconv", "--name-only", "--end-of-options", git_range)
        )
        if not files:
            files = _lines(self.quiet("diff", "--no-ext-diff", "--no-textconv", "--name-only", "HEAD"))
        return files

    def shortstat(self, git_range: str) -> Shortstat:
        """``git diff --shortstat <range>`` with the same fallback, run independently of the file list."""
        self.refuse_hostile_config()
        text = self.quiet("diff", "--no-ext-diff", "--no-textconv", "--shortstat", "--end-of-options", git_range)
        if not text.strip():
            text = self.quiet("diff", "--no-ext-diff", "--no-textconv", "--shortstat", "HEAD")
        return parse_shortstat(text)


def _lines(text: str) -> list[str]:
    return [line for line in (raw.strip() for raw in text.splitlines()) if line]
