"""pytest plugin loaded with ``-p tests.harness`` (see pyproject.toml), *before* Django's settings load.

Every test process gets a data dir of its own — ``var/test/<worker>``, where the worker is pytest-xdist's
``gw0``, ``gw1``… (``gw0`` for a run without xdist) below ``var/test`` or LESSONBOARD_DATA_DIR — with its own
metrics and broker folders (emptied at start), no .env, and, unless DATABASE_URL points at a real server,
its own embedded PostgreSQL with pgvector, started once for the whole run. With DATABASE_URL, pytest-django
gives each worker its own test database (``test_<name>_gw0``…); a Redis broker gets one database number per
worker, so two workers' Celery processes never take each other's messages.

The test database is kept between runs (pytest-django's ``--reuse-db``) as long as the migrations are the
ones it was built from: a stamp of every migration file's sha256 sits beside the data, and a change (or a
missing stamp) rebuilds it (``--create-db``). The xdist controller runs no test, so it starts nothing.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
NUMPROCESSES = re.compile(r"^(-n|--numprocesses)(=?\s*\S*)?$|^-n\S+$")


def _is_xdist_controller(argv: list[str]) -> bool:
    """Whether this process hands its tests to xdist workers (``-n N`` / ``--numprocesses``, not ``-n 0``)."""
    if WORKER:
        return False
    words = [*argv, *os.environ.get("PYTEST_ADDOPTS", "").split()]
    for index, word in enumerate(words):
        if NUMPROCESSES.match(word):
            value = word.split("=", 1)[1] if "=" in word else word[2:] if word.startswith("-n") else ""
            if not value and index + 1 < len(words):
                value = words[index + 1]
            return value.strip() not in {"0", ""}
    return False


def _lock(folder: Path) -> Any:
    """One test run per data dir: a second would empty the first's folders and fight over its database."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = (folder / ".test-run.lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(
            f"another test run is using {folder}; wait for it, or give this one its own LESSONBOARD_DATA_DIR"
        ) from None
    return lock  # held for the life of this process


def migrations_digest() -> str:
    """sha256 over every migration file of the project's apps, by path: what the test database is built from."""
    digest = hashlib.sha256()
    for path in sorted(ROOT.glob("*/migrations/*.py")):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _per_worker_redis_url(url: str, worker: str) -> str:
    """``redis://host:port/14`` → database 14 + the worker's number (mod 16, Redis's default count)."""
    match = re.match(r"^(rediss?://[^/]*)(?:/(\d+))?(.*)$", url)
    if not match or not worker.startswith("gw"):
        return url
    number = (int(match.group(2) or 0) + int(worker[2:])) % 16
    return f"{match.group(1)}/{number}{match.group(3)}"


# How the run ended (pytest_sessionfinish below); once known, the process leaves without the interpreter's
# finalisation. Tearing down the modules of a test process (Django, the embedding model, hypothesis,
# schemathesis…) ran the garbage collector over them for 20–30 s of wall time per process on a loaded
# 2-core machine (seen in gdb: Py_FinalizeEx → finalize_modules → gc_collect_main), after the last test
# had already been reported — in the controller and in every xdist worker. This handler is registered
# first, so it runs last: every other exit handler (the embedded PostgreSQL's stop among them) has run.
_FINISHED: dict[str, int] = {}


@atexit.register
def _leave_without_finalisation() -> None:
    if "status" not in _FINISHED:
        return
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_FINISHED["status"])


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    _FINISHED["status"] = int(session.exitstatus)


os.environ["LESSONBOARD_ENV_FILE"] = ""
# The run's folder, handed to xdist's workers in LESSONBOARD_TEST_BASE_DIR (their LESSONBOARD_DATA_DIR, which
# they inherit from the controller, is already a worker's folder).
BASE_DIR = Path(
    os.environ.get("LESSONBOARD_TEST_BASE_DIR") or os.environ.get("LESSONBOARD_DATA_DIR") or ROOT / "var" / "test"
).resolve()
os.environ["LESSONBOARD_TEST_BASE_DIR"] = str(BASE_DIR)
CONTROLLER = _is_xdist_controller(sys.argv[1:])
if not WORKER:
    _BASE_LOCK = _lock(BASE_DIR)  # the run as a whole (the controller, or a run without xdist)
DATA_DIR = BASE_DIR / (WORKER or "gw0")
os.environ["LESSONBOARD_DATA_DIR"] = str(DATA_DIR)

if not CONTROLLER:
    _LOCK = _lock(DATA_DIR)
    for stale in ("metrics", "broker", "cache"):
        shutil.rmtree(DATA_DIR / stale, ignore_errors=True)
    (DATA_DIR / "metrics").mkdir()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(DATA_DIR / "metrics")
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if broker.startswith(("redis://", "rediss://")):
        os.environ["CELERY_BROKER_URL"] = _per_worker_redis_url(broker, WORKER or "gw0")
os.environ.setdefault("LESSONBOARD_NODE", "testnode")
# Tests start and stop many short-lived nodes; only the failover tests let a worker adopt the jobs of a
# node whose lease ran out (tests/lessonq/test_failover.py turns it on for its own workers).
os.environ.setdefault("LESSONQ_FAILOVER", "false")
# Saving a lesson with an LLM configured queues doc2query's call: tests that script or count the fake
# model's replies would see it. tests/lessons/test_doc2query.py turns it on for its own checks.
os.environ.setdefault("LESSONBOARD_LESSONS_DOC2QUERY", "false")
# Scrapes from loopback (the test client, gunicorn under test) are allowed, as a Prometheus on the same
# host would be; tests/lessonboard/test_security.py checks the token and the deny path.
os.environ.setdefault("LESSONBOARD_METRICS_ALLOWED_ADDRESSES", "127.0.0.1,::1")
for name in ("LESSONBOARD_LLM_BASE_URL", "LESSONBOARD_LLM_MODEL", "LESSONBOARD_LLM_API_KEY", "OPENAI_API_KEY"):
    os.environ.pop(name, None)

if not CONTROLLER and not os.environ.get("DATABASE_URL"):
    from lessonboard import embedded

    _server = embedded.start(DATA_DIR / "pgdata")
    # The test cluster trades durability against a machine crash for speed: no fsync, no full-page
    # writes, no waiting for the WAL at commit. A killed *process* (what the crash tests do) loses nothing
    # with these: PostgreSQL's files are still in the kernel's page cache. lessonboard's own WAL keeps its
    # real fsyncs (those are what the tests check). Flushing the tables between transactional tests costs
    # seconds with fsync on.
    _auto_conf = DATA_DIR / "pgdata" / "postgresql.auto.conf"
    if "fsync = 'off'" not in (_auto_conf.read_text() if _auto_conf.exists() else ""):
        _server.psql(
            "ALTER SYSTEM SET fsync = off;\n"
            "ALTER SYSTEM SET full_page_writes = off;\n"
            "ALTER SYSTEM SET synchronous_commit = off;\n"
            "SELECT pg_reload_conf();\n"
        )

# Where the stamp of the migrations lives: beside the embedded data, or per server for a DATABASE_URL.
_STAMP = DATA_DIR / (
    "test-db.migrations.sha256"
    if not os.environ.get("DATABASE_URL")
    else "test-db-" + hashlib.sha256(os.environ["DATABASE_URL"].encode()).hexdigest()[:12] + ".migrations.sha256"
)


def pytest_configure(config: Any) -> None:
    if CONTROLLER:
        return
    # Keep the test database while the migrations are unchanged; rebuild it when they changed. An explicit
    # --create-db on the command line still wins.
    wanted = migrations_digest()
    built = _STAMP.read_text().strip() if _STAMP.exists() else ""
    config.option.reuse_db = True
    if built != wanted:
        config.option.create_db = True
        config._lessonboard_stamp = wanted  # written once the database is built (see below)


def pytest_sessionstart(session: Any) -> None:
    # Fast hashing for the users tests create (tests/support/hashers.py); the processes tests start prefer
    # the same hasher (tests/support/child_settings.py).
    if CONTROLLER:
        return
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["tests.support.hashers.FastPBKDF2PasswordHasher", *settings.PASSWORD_HASHERS]


def record_built_database(config: Any) -> bool:
    """Called once the test database exists (tests/conftest.py's ``django_db_setup``): stamp it if this run
    built it. True when it did, False when it reuses the last run's."""
    wanted = getattr(config, "_lessonboard_stamp", None)
    if wanted:
        _STAMP.parent.mkdir(parents=True, exist_ok=True)
        _STAMP.write_text(wanted + "\n")
        config._lessonboard_stamp = None
        return True
    return bool(config.option.create_db)
