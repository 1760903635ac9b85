"""Prometheus: the project's own series and the ``/metrics`` view.

Multiprocess mode: gunicorn workers and Celery worker processes each write their samples to files in
``PROMETHEUS_MULTIPROC_DIR`` (cleaned by ``serve`` at start); ``/metrics`` aggregates all of them, plus
``python_info`` of the serving process.
"""

from __future__ import annotations

import os

from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest, multiprocess
from prometheus_client.platform_collector import PlatformCollector

WORKER_HEARTBEATS = Counter("lessonboard_worker_heartbeats_total", "Heartbeat tasks run by Celery workers.", ["node"])


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(reg)
    else:  # pragma: no cover - single-process use (a shell); serve and tests always set the dir
        from prometheus_client import REGISTRY

        return REGISTRY
    PlatformCollector(registry=reg)
    return reg


def metrics_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
