from __future__ import annotations

import socket

from celery import shared_task
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from lessonboard.metrics import WORKER_HEARTBEATS
from lessonboard.models import WorkerHeartbeat


@shared_task(name="lessonboard.tasks.heartbeat", ignore_result=True)
def heartbeat() -> str:
    """Record that a worker is alive (the Overview shows it; ``Ping workers`` sends one on demand)."""
    hostname = f"{settings.NODE_NAME}:{socket.gethostname()}"
    updated = WorkerHeartbeat.objects.filter(hostname=hostname).update(
        last_seen=timezone.now(), beats=F("beats") + 1, node=settings.NODE_NAME
    )
    if not updated:
        WorkerHeartbeat.objects.get_or_create(hostname=hostname, defaults={"node": settings.NODE_NAME, "beats": 1})
    WORKER_HEARTBEATS.labels(node=settings.NODE_NAME).inc()
    return hostname


@shared_task(name="lessonboard.tasks.probe_llm", ignore_result=True)
def probe_llm() -> str:
    """Beat: the LLM breaker's half-open probe, when the breaker is open and a probe is due."""
    from lessonboard import breaker

    return breaker.probe()


DEPTH_SAMPLE_KEEP_DAYS = 8  # the Overview's longest window (7 d) and a day


@shared_task(name="lessonboard.tasks.sample_queue_depth", ignore_result=True)
def sample_queue_depth() -> int:
    """Beat, every minute: how many lesson jobs wait or run now (a burst between two samples of the
    hourly rebuild was invisible); samples older than the longest chart window are deleted."""
    from datetime import timedelta

    from lessonboard.models import QueueDepthSample
    from lessonq.models import ACTIVE, Job

    now = timezone.now()
    depth = Job.objects.filter(state__in=ACTIVE).count()
    QueueDepthSample.objects.create(at=now, depth=depth)
    QueueDepthSample.objects.filter(at__lt=now - timedelta(days=DEPTH_SAMPLE_KEEP_DAYS)).delete()
    return depth
