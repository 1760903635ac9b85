"""Shared set-up for the triage benchmarks: a scratch data dir (``var/bench-triage``), its own database
``lessonboard_bench_triage`` on the embedded PostgreSQL of ``var/test`` (started or attached), migrated.

Import it before anything Django; ``env()`` gives the environment for subprocesses (workers).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "var" / "bench-triage"
PGDATA = ROOT / "var" / "test" / "pgdata"
DB_NAME = "lessonboard_bench_triage"

for sub in ("metrics", "broker", "lessonq", "cache"):
    shutil.rmtree(DATA / sub, ignore_errors=True)
(DATA / "metrics").mkdir(parents=True)

from lessonboard import embedded  # noqa: E402

embedded.start(PGDATA)
embedded.ensure_database(PGDATA, DB_NAME)

os.environ.update(
    LESSONBOARD_ENV_FILE="",
    LESSONBOARD_DATA_DIR=str(DATA),
    PROMETHEUS_MULTIPROC_DIR=str(DATA / "metrics"),
    LESSONBOARD_NODE="bench",
    DATABASE_URL=embedded.database_url(PGDATA, DB_NAME),
    DJANGO_SETTINGS_MODULE="lessonboard.settings",
    LESSONBOARD_LOG_LEVEL="warning",
    LESSONBOARD_ALLOWED_HOSTS="testserver,localhost",
)

import django  # noqa: E402

django.setup()
from django.core.management import call_command  # noqa: E402

call_command("migrate", verbosity=0)


def env(**overrides: str) -> dict[str, str]:
    out = dict(os.environ)
    out.update(overrides)
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
