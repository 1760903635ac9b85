"""Restart after any crash: ``serve`` on its own embedded PostgreSQL, its process group killed with SIGKILL,
started again at once, stopped — and nothing left running.

Two crashes in a row, as they happen on a host:

1. SIGKILL of serve's group while PostgreSQL (its own session) survives: the dead serve stays listed in
   the library's ``.handle_pids.json``, and the next stop used to leave PostgreSQL running.
2. SIGKILL of the group *and* of the postmaster, which nobody reaps: this test process is made the
   children's subreaper, so the killed postmaster stays a zombie — psutil calls it running, and the next
   start used to attach to it and fail with "connection refused".
"""

from __future__ import annotations

import ctypes
import os
import shutil
import uuid
from pathlib import Path

import psutil
import pytest
from django.conf import settings

from lessonboard import embedded
from tests.lessonboard.test_serve import Serve
from tests.support.wait import wait_for

pytestmark = [pytest.mark.worker]

PR_SET_CHILD_SUBREAPER = 36


def _processes_using(data_dir: Path) -> list[str]:
    """Processes of this run of serve: working in its pgdata, or started with its data dir."""
    found = []
    for proc in psutil.process_iter(["pid", "name", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            cwd = proc.cwd()
            data = proc.environ().get("LESSONBOARD_DATA_DIR")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if cwd.startswith(str(data_dir)) or data == str(data_dir):
            found.append(f"{proc.pid} {proc.info['name']} (cwd {cwd})")
    return found


def _postmaster_pid(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().split()[0])


def _start(data_dir: Path) -> Serve:
    serve = Serve(data_dir, DATABASE_URL="", LESSONBOARD_SERVE_CRASH_LOOP_EXITS="5")
    serve.wait_up(timeout=300)
    assert serve.get("/readyz")[0] == 200, serve.get("/readyz")[1]
    return serve


@pytest.fixture
def subreaper():  # type: ignore[no-untyped-def]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0)
    for proc in psutil.Process().children():  # reap the orphans this test adopted
        if proc.status() == psutil.STATUS_ZOMBIE:
            try:
                os.waitpid(proc.pid, 0)
            except ChildProcessError:
                pass


@pytest.fixture
def data_dir():  # type: ignore[no-untyped-def]
    # Under the test run's data dir, not /tmp: PostgreSQL runs as another user when the tests run as root,
    # and every pytest session makes /tmp/pytest-of-<user> private again.
    path = Path(settings.DATA_DIR) / f"serve-restart-{uuid.uuid4().hex[:8]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_it_starts_at_once_after_kill_9_of_the_whole_group_and_the_next_stop_leaves_nothing(
    data_dir: Path, subreaper: None
) -> None:
    pgdata = data_dir / "pgdata"

    # Crash 1: the group dies, PostgreSQL (own session) lives on.
    first = _start(data_dir)
    first.kill_group()
    survivor = _postmaster_pid(pgdata)
    assert embedded.is_running(pgdata)

    second = _start(data_dir)
    assert _postmaster_pid(pgdata) == survivor  # attached to the live server
    # Crash 2: the group and the postmaster die; the postmaster is this process's unreaped child now.
    second.kill_group()
    postmaster = psutil.Process(_postmaster_pid(pgdata))
    assert postmaster.ppid() == os.getpid()
    postmaster.kill()
    wait_for(lambda: postmaster.status() == psutil.STATUS_ZOMBIE, timeout=30, what="a zombie postmaster")
    assert not embedded.is_running(pgdata)

    third = _start(data_dir)
    assert _postmaster_pid(pgdata) != postmaster.pid
    assert "removing the stale lock file" in third.log()
    third.stop()

    assert third.proc.returncode == 0, third.log()[-3000:]
    assert wait_for(lambda: not _processes_using(data_dir), timeout=60, what="no process left")
    assert not (pgdata / "postmaster.pid").exists()
