from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from lessonboard import llm
from refine.models import RefineRun, RunStatus
from refine.runs import STALE_RUNNING, execute_run

# A queued run older than this is published again by the sweep (claiming makes a duplicate harmless).
REQUEUE_AFTER = timedelta(minutes=2)
SWEEP_BATCH = 100


@shared_task(name="refine.tasks.run_refine", queue="llm", ignore_result=True)
def run_refine(run_id: int) -> str:
    """Run one refine (ids in, outcome out). Refiner errors do not retry: chatcli keeps the previous
    draft and stops, and the run row records why. With no LLM configured the run stays queued, saying
    so, and the sweep publishes it again once one is."""
    if not llm.is_configured():
        RefineRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(error=f"waiting: {llm.status_text()}")
        return "waiting for an LLM"
    run = execute_run(run_id)
    return run.outcome if run is not None else "not claimable"


@shared_task(name="refine.tasks.requeue_stalled", ignore_result=True)
def requeue_stalled() -> list[int]:
    """Beat: publish stalled runs again (lost messages, runs that waited for an LLM, dead workers)."""
    if not llm.is_configured():
        return []
    now = timezone.now()
    ids = list(
        RefineRun.objects.stalled(queued_before=now - REQUEUE_AFTER, running_before=now - STALE_RUNNING)
        .order_by("created_at")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    for run_id in ids:
        run_refine.delay(run_id)
    return ids
