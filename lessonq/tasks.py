"""Celery tasks: ids in, a domain function called, nothing else."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from lessonboard.models import QueueDepthSample
from lessonq import dlq, processing, reconcile
from lessonq.dispatch import PROCESS_JOB
from lessonq.models import ACTIVE, Job

# A hard backstop above the per-job timeout (which bounds the LLM call): a child stuck past it is
# killed, the message redelivered and the lost attempt counted by the next claim.
_HARD_LIMIT = settings.LESSONQ_JOB_TIMEOUT + 60


@shared_task(name=PROCESS_JOB, ignore_result=True, acks_late=True, time_limit=_HARD_LIMIT)
def process_job(job_id: str) -> str:
    return processing.process(job_id)


@shared_task(name="lessonq.tasks.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    """This node's sweep (runs on ``lessonq.<node>``, next to the WAL)."""
    from lessonboard import pauses

    pauses.forget()  # a sweep sent by a resume must not see this process's cached pause
    return reconcile.sweep().as_dict()


@shared_task(name="lessonq.tasks.sweep_all", ignore_result=True)
def sweep_all() -> list[str]:
    """Beat entry: fan the sweep out to every known node's queue."""
    queues = reconcile.known_queues()
    for queue in queues:
        sweep.apply_async(queue=queue)
    return queues


@shared_task(name="lessonq.tasks.replay", ignore_result=True)
def replay() -> dict[str, int]:
    return reconcile.replay().as_dict()


@shared_task(name="lessonq.tasks.retry_dead", ignore_result=True)
def retry_dead(job_id: str) -> str:
    """A DLQ retry asked for on another node, run where the DLQ record lives."""
    dlq.retry(job_id, actor="remote")
    return job_id


@shared_task(name="lessonq.tasks.purge_dead", ignore_result=True)
def purge_dead(job_id: str) -> str:
    dlq.purge(job_id, actor="remote")
    return job_id


# DLQ triage: register its tasks with the worker (autodiscovery imports this module only).
from lessonq import bulk, retention  # noqa: E402,F401

DEPTH_SAMPLE_KEEP_DAYS = 8  # the Overview's longest window (7 d) and a day


@shared_task(name="lessonq.tasks.sample_queue_depth", ignore_result=True)
def sample_queue_depth() -> int:
    """Beat, every minute: how many lesson jobs wait or run now (a burst between two samples of the
    hourly rebuild was invisible); samples older than the longest chart window are deleted."""
    now = timezone.now()
    depth = Job.objects.filter(state__in=ACTIVE).count()
    QueueDepthSample.objects.create(at=now, depth=depth)
    QueueDepthSample.objects.filter(at__lt=now - timedelta(days=DEPTH_SAMPLE_KEEP_DAYS)).delete()
    return depth
