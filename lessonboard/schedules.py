"""The recurring work beat sends (the Schedules page, docs/operations.md#schedules): what beat's schedule
says (``lessonboard.celery``'s app configuration) and, per task, its last run as the worker that ran it
recorded it in ``ScheduleRun`` (started, duration, the last error)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError
from django.db.models import F
from django.utils import timezone

log = logging.getLogger(__name__)

_started: dict[str, float] = {}  # task id → monotonic start, in the worker process that runs it


def beat_schedule() -> dict[str, dict[str, Any]]:
    from lessonboard.celery import app

    return dict(app.conf.beat_schedule or {})


def scheduled_tasks() -> set[str]:
    return {str(entry["task"]) for entry in beat_schedule().values()}


def _interval(entry: dict[str, Any]) -> timedelta | None:
    raw = entry.get("schedule")
    if isinstance(raw, int | float):
        return timedelta(seconds=float(raw))
    if isinstance(raw, timedelta):
        return raw
    run_every = getattr(raw, "run_every", None)
    return run_every if isinstance(run_every, timedelta) else None


@dataclass(frozen=True)
class Row:
    name: str
    task: str
    every: timedelta | None
    schedule: str
    last_started: datetime | None
    duration_ms: int | None
    ok: bool | None
    last_error: str
    last_error_at: datetime | None
    runs: int
    next_run: datetime | None


def rows() -> list[Row]:
    from lessonboard.models import ScheduleRun

    runs = {r.task: r for r in ScheduleRun.objects.all()}
    now = timezone.now()
    found = []
    for name, entry in sorted(beat_schedule().items()):
        task = str(entry["task"])
        run = runs.get(task)
        every = _interval(entry)
        next_run = None
        if run is not None and run.started_at is not None and every is not None:
            next_run = max(run.started_at + every, now)
        found.append(
            Row(
                name=name,
                task=task,
                every=every,
                schedule=f"every {every.total_seconds():g} s" if every is not None else str(entry.get("schedule")),
                last_started=run.started_at if run else None,
                duration_ms=run.duration_ms if run else None,
                ok=run.ok if run else None,
                last_error=run.last_error if run else "",
                last_error_at=run.last_error_at if run else None,
                runs=run.runs if run else 0,
                next_run=next_run,
            )
        )
    return found


# --- the record, kept by Celery's signals in the worker ------------------------------------------------------
def on_prerun(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if task is not None and task_id and task.name in scheduled_tasks():
        _started[task_id] = time.monotonic()


def on_postrun(
    task_id: str | None = None, task: Any = None, state: str | None = None, retval: Any = None, **_: Any
) -> None:
    if task is None or not task_id or task_id not in _started:
        return
    from lessonboard.models import ScheduleRun

    took = time.monotonic() - _started.pop(task_id)
    now = timezone.now()
    ok = state == "SUCCESS"
    values: dict[str, Any] = {
        "started_at": now - timedelta(seconds=took),
        "finished_at": now,
        "duration_ms": int(took * 1000),
        "ok": ok,
        "runs": F("runs") + 1,
    }
    if not ok:
        values.update(last_error=f"{type(retval).__name__}: {retval}"[:2000], last_error_at=now)
    try:
        if not ScheduleRun.objects.filter(pk=task.name).update(**values):
            values["runs"] = 1
            ScheduleRun.objects.get_or_create(pk=task.name, defaults=values)
    except DatabaseError as exc:  # the record is for people; the task's own work is done
        log.warning("schedules: cannot record the run of %s: %s", task.name, exc)


def connect() -> None:
    from celery.signals import task_postrun, task_prerun

    task_prerun.connect(on_prerun, dispatch_uid="lessonboard.schedules.prerun", weak=False)
    task_postrun.connect(on_postrun, dispatch_uid="lessonboard.schedules.postrun", weak=False)
