from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from lessonboard import pauses
from refine.models import RefineRun, RunStatus
from refine.runs import RUN_REFINE, RUN_REFINE_QUEUE, STALE_RUNNING, execute_run

# A queued run older than this is published again by the sweep (claiming makes a duplicate harmless).
REQUEUE_AFTER = timedelta(minutes=2)
SWEEP_BATCH = 100


@shared_task(name=RUN_REFINE, queue=RUN_REFINE_QUEUE, ignore_result=True)
def run_refine(run_id: int) -> str:
    """Run one refine (ids in, outcome out). Refiner errors do not retry: chatcli keeps the previous
    draft and stops, and the run row records why. With no LLM configured the run stays queued, saying
    so, and the sweep publishes it again once one is."""
    reason = pauses.unavailable_reason("refine")
    if reason:  # paused, none configured, or the breaker is open (docs/operations.md#llm-outage)
        RefineRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(error=f"waiting: {reason}")
        return "waiting for an LLM"
    run = execute_run(run_id)
    return run.outcome if run is not None else "not claimable"


@shared_task(name="refine.tasks.requeue_stalled", ignore_result=True)
def requeue_stalled() -> list[int]:
    """Beat (and the LLM breaker closing): publish stalled runs again (lost messages, runs that waited
    for an LLM, dead workers)."""
    if pauses.unavailable_reason("refine"):
        return []
    now = timezone.now()
    ids = list(
        RefineRun.objects.stalled(queued_before=now - REQUEUE_AFTER, running_before=now - STALE_RUNNING)
        .union_waiting()
        .order_by("created_at")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    for run_id in ids:
        run_refine.delay(run_id)
    return ids
