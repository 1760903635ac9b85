from __future__ import annotations

from celery import shared_task

from refine.runs import execute_run


@shared_task(name="refine.tasks.run_refine", queue="llm", ignore_result=True)
def run_refine(run_id: int) -> str:
    """Run one refine (ids in, outcome out). Refiner errors do not retry: chatcli keeps the previous
    draft and stops, and the run row records why."""
    run = execute_run(run_id)
    return run.outcome if run is not None else "not claimable"
