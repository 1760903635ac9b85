"""Operator controls every queue dashboard has: pause and resume a queue, what runs now (with cancel), the
schedules of beat's tasks (docs/operations.md#pause-and-resume,
docs/operations.md#running-now, docs/operations.md#schedules)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from lessonboard import pauses, schedules
from lessonboard.permissions import require_perm, view_required
from lessonq.cancel import cancel
from lessonq.dlq import DLQError
from lessonq.models import Job, JobAttempt, JobState


def _bad_queue(name: str) -> JsonResponse:
    return JsonResponse(
        {"error": "invalid", "field": "queue", "detail": f"no queue {name!r} (one of {', '.join(pauses.QUEUES)})"},
        status=404,
    )


@require_POST
@require_perm("lessonboard.operate_queue")
def queue_pause(request: HttpRequest, name: str) -> HttpResponse:
    if name not in pauses.QUEUES:
        return _bad_queue(name)
    why = (request.POST.get("reason") or "").strip()
    if pauses.pause(name, user=request.user, why=why):
        messages.success(request, f"Paused {name}: its work waits until you resume it.")
    else:
        messages.info(request, f"{name} was already paused.")
    return redirect("overview")


@require_POST
@require_perm("lessonboard.operate_queue")
def queue_resume(request: HttpRequest, name: str) -> HttpResponse:
    if name not in pauses.QUEUES:
        return _bad_queue(name)
    if pauses.resume(name, user=request.user):
        messages.success(request, f"Resumed {name}: what waited is dispatched now.")
    else:
        messages.info(request, f"{name} was not paused.")
    return redirect("overview")


@require_GET
@view_required
def running_now(request: HttpRequest) -> HttpResponse:
    """What runs now: each running lesson job with its worker, node, start and elapsed time."""

    jobs = list(Job.objects.filter(state=JobState.RUNNING).order_by("updated_at")[:200])
    attempts = {
        a.job_id: a
        for a in JobAttempt.objects.filter(job__in=[j.pk for j in jobs], finished_at__isnull=True).order_by("number")
    }
    now = timezone.now()
    rows = []
    for job in jobs:
        attempt = attempts.get(job.pk)
        started = attempt.started_at if attempt else job.updated_at
        rows.append(
            {
                "job": job,
                "worker": (attempt.worker if attempt else "") or job.claimed_by,
                "started": started,
                "elapsed": int((now - started).total_seconds()),
                "attempt": attempt.number if attempt else job.attempts,
            }
        )
    context = {
        "rows": rows,
        "can_operate": request.user.has_perm("lessonboard.operate_queue"),
        "concurrency": settings.WORKER_CONCURRENCY,
        "capacity": settings.LESSONQ_CAPACITY,
        "queues": settings.WORKER_QUEUES,
    }
    return render(request, "lessonboard/running.html", context)


@require_POST
@require_perm("lessonboard.operate_queue")
def job_cancel(request: HttpRequest, job_id: str) -> HttpResponse:

    try:
        cancel(job_id, user=request.user, reason=(request.POST.get("reason") or "").strip()[:300])
    except DLQError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Cancelled job {job_id}: its attempt is recorded as cancelled; retry it from Dead.")
    return redirect("running-now")


@require_GET
@view_required
def schedules_page(request: HttpRequest) -> HttpResponse:

    return render(request, "lessonboard/schedules.html", {"rows": schedules.rows()})
