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
from prometheus_client.registry import Collector

WORKER_HEARTBEATS = Counter("lessonboard_worker_heartbeats_total", "Heartbeat tasks run by Celery workers.", ["node"])

# Collectors whose values are computed at scrape time (e.g. gauges read from the WAL and the database,
# which a per-process gauge cannot get right across processes). Apps append from AppConfig.ready().
EXTRA_COLLECTORS: list[Collector] = []


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(reg)
    else:  # pragma: no cover - single-process use (a shell); serve and tests always set the dir
        from prometheus_client import REGISTRY

        return REGISTRY
    PlatformCollector(registry=reg)
    for collector in EXTRA_COLLECTORS:
        reg.register(collector)
    return reg


def metrics_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
