"""Readiness checks for ``/readyz``: each returns (ok, detail) and never raises."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

Check = Callable[[], tuple[bool, str]]


def check_database() -> tuple[bool, str]:
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT 1")
        return True, "reachable"
    except Exception as exc:
        return False, f"unreachable: {exc}".strip()


def check_migrations() -> tuple[bool, str]:
    try:
        connection = connections[DEFAULT_DB_ALIAS]
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:
        return False, f"cannot read migration state: {exc}"
    if plan:
        return False, f"{len(plan)} migration(s) not applied (run manage.py migrate)"
    return True, "applied"


def check_broker() -> tuple[bool, str]:
    url = settings.CELERY_BROKER_URL
    if url.startswith("atomicfs://"):
        return _writable(Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]), "embedded broker")
    from lessonboard.celery import app

    try:
        with app.connection_for_write(url) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return True, f"reachable ({conn.transport_cls})"
    except Exception as exc:
        return False, f"unreachable: {exc}"


def check_data_dir() -> tuple[bool, str]:
    ok, detail = _writable(settings.DATA_DIR, "data dir")
    if not ok:
        return ok, detail
    for extra in getattr(settings, "READINESS_DIRS", []):
        ok, detail = _writable(Path(extra), str(extra))
        if not ok:
            return ok, detail
    return True, "writable"


def _writable(path: Path, label: str) -> tuple[bool, str]:
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path, prefix=".readyz.")
        os.close(fd)
        os.unlink(name)
        return True, "writable"
    except OSError as exc:
        return False, f"{label} {path} not writable: {exc}"


def check_children() -> tuple[bool, str]:
    from lessonboard.supervisor import check_children

    return check_children()


def check_llm() -> tuple[bool, str]:
    """Advisory: an unreachable LLM degrades lessonboard (that work waits) but it stays ready."""
    from lessonboard import breaker, llm
    from lessonboard.llm import limiter, ratelimit

    outage = breaker.outage()
    if outage is not None:
        return False, f"degraded: {outage.text} ({outage.failures} consecutive failures; work that needs it waits)"
    cut = limiter.cut_text()
    pause = ratelimit.current()
    if pause is not None:
        text = f"degraded: {pause.text} (calls resume in {pause.seconds():.0f} s; work that needs it waits)"
        return False, f"{text}; {cut}" if cut else text
    return True, f"{llm.status_text()}; {cut}" if cut else llm.status_text()


def check_pauses() -> tuple[bool, str]:
    """Advisory: a queue an operator paused holds its work back (degraded, still ready)."""
    from lessonboard import pauses

    paused = pauses.current()
    return not paused, pauses.readiness()[1]


CHECKS: dict[str, Check] = {
    "database": check_database,
    "migrations": check_migrations,
    "broker": check_broker,
    "data_dir": check_data_dir,
    "processes": check_children,
}


# Checks that report "degraded" (still 200) instead of failing readiness.
ADVISORY: dict[str, Check] = {"llm": check_llm, "pauses": check_pauses}


def run_checks() -> tuple[bool, dict[str, dict[str, object]]]:
    """All required checks (``ok`` is their conjunction), then the advisory ones, marked ``advisory``."""
    results: dict[str, dict[str, object]] = {}
    all_ok = True
    for name, check in CHECKS.items():
        if name == "migrations" and not results.get("database", {}).get("ok", True):
            ok, detail = False, "skipped: database unreachable"
        else:
            ok, detail = check()
        results[name] = {"ok": ok, "detail": detail}
        all_ok = all_ok and ok
    for name, check in ADVISORY.items():
        ok, detail = check()
        results[name] = {"ok": ok, "detail": detail, "advisory": True}
    return all_ok, results


def degraded(results: dict[str, dict[str, object]]) -> bool:
    return any(r.get("advisory") and not r["ok"] for r in results.values())
