"""How ``manage.py serve`` keeps its children (web, worker, beat) running, and what it tells others.

A child that exits while lessonboard runs is restarted after a backoff (``LESSONBOARD_SERVE_RESTART_BACKOFF``
doubling up to ``…_BACKOFF_MAX``); each exit is logged and counted in
``lessonboard_serve_child_exits_total{child}``. A child that exits ``LESSONBOARD_SERVE_CRASH_LOOP_EXITS`` times
within ``LESSONBOARD_SERVE_CRASH_LOOP_WINDOW`` seconds is crash-looping: ``serve`` stops everything and exits
non-zero with the reason. ``serve`` writes the children's state to ``<data dir>/serve-status.json``, which
``/readyz`` and the Overview read (see docs/operations.md#supervision).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from django.conf import settings
from prometheus_client import Counter

from lessonboard.files import write_atomic

CHILD_EXITS = Counter(
    "lessonboard_serve_child_exits_total",
    "Children of `serve` (web, worker, beat) that exited and were restarted.",
    ["child"],
)

_PR_SET_PDEATHSIG = 1


class CrashLoop(Exception):
    """A child exited too often in too short a time: restarting it again would only hide the fault."""


def status_path() -> Path:
    return Path(settings.DATA_DIR) / "serve-status.json"


def _die_with_serve() -> None:  # pragma: no cover - runs in the child between fork and exec
    # The child has its own session (a terminal's Ctrl-C reaches only serve), so a SIGKILL of serve's
    # process group would leave it running: ask the kernel for SIGTERM when serve dies, whatever the way.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Child:
    name: str
    cmd: list[str]
    env: dict[str, str]
    cwd: Path
    proc: subprocess.Popen[bytes] | None = None
    exits: deque[float] = field(default_factory=deque)  # monotonic times of recent exits
    down_since: float | None = None  # wall clock
    last_status: int | None = None
    restart_at: float = 0.0  # monotonic
    log_path: Path | None = None  # the child's stdout and stderr go here (appended); None: serve's own

    def start(self) -> None:
        if self.log_path is None:
            self.proc = subprocess.Popen(
                self.cmd, env=self.env, cwd=self.cwd, start_new_session=True, preexec_fn=_die_with_serve
            )
        else:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with self.log_path.open("ab") as log:  # the child keeps its own descriptor
                self.proc = subprocess.Popen(
                    self.cmd,
                    env=self.env,
                    cwd=self.cwd,
                    start_new_session=True,
                    preexec_fn=_die_with_serve,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        self.down_since = None

    @property
    def where_output_goes(self) -> str:
        return str(self.log_path) if self.log_path is not None else "its output above"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self, now: float) -> str | None:
        """Notice an exit, schedule the restart; return a line for the log, or None if nothing changed.
        Raises CrashLoop when this exit is one too many."""
        if self.proc is None or self.proc.poll() is None:
            return None
        self.last_status = self.proc.returncode
        self.proc = None
        self.down_since = time.time()
        CHILD_EXITS.labels(self.name).inc()
        window = settings.SERVE_CRASH_LOOP_WINDOW
        self.exits.append(now)
        while self.exits and now - self.exits[0] > window:
            self.exits.popleft()
        if len(self.exits) >= settings.SERVE_CRASH_LOOP_EXITS:
            raise CrashLoop(
                f"{self.name} is crash-looping: it exited {len(self.exits)} times within {window:.0f} s "
                f"(last exit status {self.last_status}); stopping lessonboard — see {self.where_output_goes}"
            )
        delay = min(settings.SERVE_RESTART_BACKOFF * 2 ** (len(self.exits) - 1), settings.SERVE_RESTART_BACKOFF_MAX)
        self.restart_at = now + delay
        return (
            f"{self.name} exited with status {self.last_status}; restarting it in {delay:.1f} s "
            f"({len(self.exits)} exit(s) in the last {window:.0f} s)"
        )

    def due(self, now: float) -> bool:
        return self.proc is None and now >= self.restart_at

    def state(self) -> dict[str, Any]:
        return {
            "state": "running" if self.running else "down",
            "pid": self.proc.pid if self.proc is not None else None,
            "down_since": datetime.fromtimestamp(self.down_since, UTC).isoformat() if self.down_since else None,
            "last_exit_status": self.last_status,
            "recent_exits": len(self.exits),
        }


def write_status(children: list[Child]) -> None:
    data = {"serve_pid": os.getpid(), "children": {child.name: child.state() for child in children}}
    write_atomic(status_path(), json.dumps(data, indent=1).encode(), mode=0o644)


def clear_status() -> None:
    status_path().unlink(missing_ok=True)


def read_status() -> dict[str, Any] | None:
    """The children's state as ``serve`` last wrote it; None when no live ``serve`` wrote it."""
    try:
        data = json.loads(status_path().read_text())
        pid = int(data["serve_pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.NoSuchProcess:
        return None
    children = data.get("children")
    return children if isinstance(children, dict) else None


def down_children() -> dict[str, dict[str, Any]]:
    children = read_status() or {}
    return {name: state for name, state in children.items() if state.get("state") != "running"}


def check_children() -> tuple[bool, str]:
    """For ``/readyz``: a child that is down degrades lessonboard but does not make it unready (the web
    answers, the database and the WAL keep every job)."""
    children = read_status()
    if children is None:
        return True, "not run by manage.py serve"
    down = down_children()
    if not down:
        return True, "running: " + ", ".join(sorted(children))
    parts = [
        f"{name} down since {state.get('down_since')} (exit status {state.get('last_exit_status')}, "
        f"{state.get('recent_exits')} recent exit(s)); serve is restarting it"
        for name, state in sorted(down.items())
    ]
    return True, "degraded: " + "; ".join(parts)
