"""Shared set-up for benchmarks: a scratch data dir (``var/bench-<name>``) and its own database
``lessonboard_bench_<name>`` on the embedded PostgreSQL of ``var/test`` (started or attached), migrated.

Call ``setup(name)`` before importing anything Django; ``env()`` gives the environment for subprocesses
(workers, gunicorn).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PGDATA = ROOT / "var" / "test" / "pgdata"


def setup(name: str, *, fresh_db: bool = False, **extra_env: str) -> Path:
    """Prepare ``var/bench-<name>`` and database ``lessonboard_bench_<name>``, then ``django.setup()``
    and migrate. ``fresh_db`` drops the database first, so it always matches the current migrations."""
    sys.path.insert(0, str(ROOT))
    data = ROOT / "var" / f"bench-{name}"
    db_name = f"lessonboard_bench_{name}"
    for sub in ("metrics", "broker", "lessonq", "cache"):
        shutil.rmtree(data / sub, ignore_errors=True)
    (data / "metrics").mkdir(parents=True)

    from lessonboard import embedded

    embedded.start(PGDATA)
    if fresh_db:
        import psycopg

        with psycopg.connect(
            host=str(embedded.socket_dir(PGDATA)), user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
    embedded.ensure_database(PGDATA, db_name)

    os.environ.update(
        LESSONBOARD_ENV_FILE="",
        LESSONBOARD_DATA_DIR=str(data),
        PROMETHEUS_MULTIPROC_DIR=str(data / "metrics"),
        LESSONBOARD_NODE="bench",
        DATABASE_URL=embedded.database_url(PGDATA, db_name),
        DJANGO_SETTINGS_MODULE="lessonboard.settings",
        LESSONBOARD_LOG_LEVEL="warning",
        **extra_env,
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return data


def env(**overrides: str) -> dict[str, str]:
    out = dict(os.environ)
    out.update(overrides)
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
