from __future__ import annotations

from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from lessonboard import health, llm, overview
from lessonboard.models import AuditEvent, WorkerHeartbeat
from lessonboard.permissions import require_perm, view_required
from lessonboard.tasks import heartbeat


def _overview_context(request: HttpRequest) -> dict[str, object]:
    return {
        "groups": overview.collect(),
        "workers": WorkerHeartbeat.objects.all()[:20],
        "llm_configured": llm.is_configured(),
        "llm_status": llm.status_text(),
        "can_operate": request.user.has_perm("lessonboard.operate_queue"),
    }


@require_GET
@view_required
def overview_page(request: HttpRequest) -> HttpResponse:
    template = "lessonboard/overview.html#counts" if request.htmx else "lessonboard/overview.html"  # type: ignore[attr-defined]
    return render(request, template, _overview_context(request))


@require_POST
@require_perm("lessonboard.operate_queue")
def ping_workers(request: HttpRequest) -> HttpResponse:
    """Publish one heartbeat task; the Overview's worker list shows who answered."""
    transaction.on_commit(heartbeat.delay)
    AuditEvent.record("workers.ping", user=request.user, object_type="worker")
    if request.htmx:  # type: ignore[attr-defined]
        return render(request, "lessonboard/overview.html#ping-sent", {})
    messages.success(request, "Heartbeat sent to the workers.")
    return redirect("overview")


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    ok, checks = health.run_checks()
    return JsonResponse({"status": "ready" if ok else "not ready", "checks": checks}, status=200 if ok else 503)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404: JSON under /api/ (agents parse it), the HTML page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": f"no API endpoint at {request.path}"}, status=404)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "internal error; it has been logged"}, status=500)
    return render(request, "500.html", status=500)
