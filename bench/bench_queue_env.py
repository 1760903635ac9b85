"""Shared set-up for the queue benchmarks: a scratch data dir (``var/bench-queue``), its own database
``lessonboard_bench_queue`` on the embedded PostgreSQL of ``var/test`` (started or attached), migrated.

Import it before anything Django; ``env()`` gives the environment for subprocesses (workers, gunicorn).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "var" / "bench-queue"
PGDATA = ROOT / "var" / "test" / "pgdata"
DB_NAME = "lessonboard_bench_queue"

for sub in ("metrics", "broker", "lessonq", "cache"):
    shutil.rmtree(DATA / sub, ignore_errors=True)
(DATA / "metrics").mkdir(parents=True)

from lessonboard import embedded  # noqa: E402

embedded.start(PGDATA)
# A scratch database, recreated per run so it always matches the current migrations.
import psycopg  # noqa: E402

with psycopg.connect(host=str(embedded.socket_dir(PGDATA)), user="postgres", dbname="postgres", autocommit=True) as _c:
    _c.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
embedded.ensure_database(PGDATA, DB_NAME)

os.environ.update(
    LESSONBOARD_ENV_FILE="",
    LESSONBOARD_DATA_DIR=str(DATA),
    PROMETHEUS_MULTIPROC_DIR=str(DATA / "metrics"),
    LESSONBOARD_NODE="bench",
    DATABASE_URL=embedded.database_url(PGDATA, DB_NAME),
    DJANGO_SETTINGS_MODULE="lessonboard.settings",
    LESSONBOARD_LOG_LEVEL="warning",
)

import django  # noqa: E402

django.setup()
from django.core.management import call_command  # noqa: E402

call_command("migrate", verbosity=0)


def reset_queue() -> None:
    from lessonq.models import Job
    from lessons.models import Lesson

    Job.objects.all().delete()
    Lesson.objects.filter(source_job_id__isnull=False).delete()


def env(**overrides: str) -> dict[str, str]:
    out = dict(os.environ)
    out.update(overrides)
    return out
