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
    hostname = f"{settings.NODE}:{socket.gethostname()}"
    updated = WorkerHeartbeat.objects.filter(hostname=hostname).update(
        last_seen=timezone.now(), beats=F("beats") + 1, node=settings.NODE
    )
    if not updated:
        WorkerHeartbeat.objects.get_or_create(hostname=hostname, defaults={"node": settings.NODE, "beats": 1})
    WORKER_HEARTBEATS.labels(node=settings.NODE).inc()
    return hostname


@shared_task(name="lessonboard.tasks.purge_llm_calls", ignore_result=True)
def purge_llm_calls() -> int:
    """Beat: delete LLM call records older than LESSONBOARD_LLM_CALL_RETENTION."""
    from lessonboard.llm import usage

    return usage.purge()


@shared_task(name="lessonboard.tasks.probe_llm", ignore_result=True)
def probe_llm() -> str:
    """Beat: the LLM breaker's half-open probe, when the breaker is open and a probe is due."""
    from lessonboard import breaker

    return breaker.probe()
