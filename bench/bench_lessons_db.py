"""Shared set-up for the lessons benchmarks: an embedded PostgreSQL under ``var/bench`` (not the dev or test
database), migrated, with Django configured. ``import bench_lessons_db; bench_lessons_db.setup()``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup(db_name: str = "lessonboard_bench") -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["LESSONBOARD_ENV_FILE"] = ""
    data_dir = Path(os.environ.setdefault("LESSONBOARD_DATA_DIR", str(ROOT / "var" / "bench")))
    os.environ.setdefault("LESSONBOARD_EMBEDDED_DB_NAME", db_name)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lessonboard.settings")
    from lessonboard import embedded

    pgdata = data_dir / "pgdata"
    embedded.start(pgdata)
    embedded.ensure_database(pgdata, db_name)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def empty_lessons() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE lessons_lesson, lessons_lessonversion RESTART IDENTITY CASCADE")
