"""The Celery app. Workers: ``celery -A lessonboard worker -Q default,embed,llm,lessonq.<node>``."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import worker_process_shutdown

import lessonboard.broker  # noqa: F401  (registers the embedded broker's atomicfs:// transport with kombu)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lessonboard.settings")

app = Celery("lessonboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_shutdown.connect
def _mark_metrics_process_dead(pid: int | None = None, **_: Any) -> None:
    # prometheus_client multiprocess mode: drop this process's live gauges once it is gone.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())
