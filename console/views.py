from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from console import charts, dependencies, firstrun, inbox, quality
from lessonboard import breaker, llm, overview, pauses
from lessonboard.llm import limiter, ratelimit
from lessonboard.models import AuditEvent, WorkerHeartbeat
from lessonboard.permissions import needs_role, require_perm, view_required
from lessonboard.tasks import heartbeat
from lessonq import leader, presence


def _overview_context(request: HttpRequest) -> dict[str, object]:
    return {
        "groups": overview.collect(),
        "workers": WorkerHeartbeat.objects.all()[:20],
        "llm_configured": llm.is_configured(),
        "llm_status": llm.status_text(),
        "llm_outage": breaker.outage(),
        "llm_pause": ratelimit.current(),
        "llm_concurrency": limiter.states() if llm.is_configured() else [],
        "can_operate": request.user.has_perm("lessonboard.operate_queue"),
        "queues": pauses.states(),
        **_nodes_context(),
    }


def _nodes_context() -> dict[str, object]:
    """Every node's web and worker state and the scheduler's leader (docs/operations.md#nodes)."""
    return {"nodes": presence.nodes(), "scheduler": leader.state()}


@require_GET
@view_required
def overview_page(request: HttpRequest) -> HttpResponse:
    template = "lessonboard/overview.html#counts" if request.htmx else "lessonboard/overview.html"  # type: ignore[attr-defined]
    context = _overview_context(request)
    if not request.htmx:  # type: ignore[attr-defined]
        context.update(_charts_context(request))
        context["first_run"] = firstrun.guide(request.build_absolute_uri("/"))
    return render(request, template, context)


def _charts_context(request: HttpRequest) -> dict[str, object]:
    window = request.GET.get("window", "24h")
    return {"charts": charts.collect(window), "dependencies": dependencies.states(), "windows": list(charts.WINDOWS)}


@require_GET
@view_required
def overview_charts(request: HttpRequest) -> HttpResponse:
    """The charts and dependency states alone (the Overview polls them)."""
    return render(request, "lessonboard/overview.html#charts", _charts_context(request))


@require_GET
@view_required
def inbox_page(request: HttpRequest) -> HttpResponse:
    """Everything waiting for a person (``console.inbox``); htmx polls the list."""
    items = inbox.items_for(request.user)
    request.inbox_count = len(items)  # type: ignore[attr-defined]  # the nav badge of this page
    context = {"items": items, "count": len(items), "oob_count": bool(request.htmx)}  # type: ignore[attr-defined]
    template = "lessonboard/inbox.html#inbox-list" if request.htmx else "lessonboard/inbox.html"  # type: ignore[attr-defined]
    return render(request, template, context)


@require_POST
@view_required
def inbox_act(request: HttpRequest) -> HttpResponse:
    """One row's action, done in place: htmx gets the row back saying what happened (and the nav count)."""
    kind, key, name = request.POST.get("kind", ""), request.POST.get("key", ""), request.POST.get("action", "")
    action = next((a for a in inbox.ACTIONS.get(kind, []) if a.name == name), None)
    if action is None or not key:
        return HttpResponse("Unknown inbox action.", status=400)
    if action.perm is not None and not request.user.has_perm(action.perm):
        raise PermissionDenied(needs_role(action.perm))
    if not inbox.valid_key(kind, key):
        return HttpResponse("Unknown inbox item.", status=400)
    ok = True
    try:
        text = inbox.act(kind, key, name, request.user, reason=request.POST.get("reason", "")[:1000])
    except inbox.InboxError as exc:
        ok, text = False, str(exc)
    inbox.forget_count(request.user)
    if not request.htmx:  # type: ignore[attr-defined]
        (messages.success if ok else messages.error)(request, text)
        return redirect("inbox")
    context = {"kind": kind, "key": key, "text": text, "ok": ok, "nav_inbox_count": inbox.count_for(request.user)}
    return render(request, "lessonboard/inbox.html#row-done", context)


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


@require_GET
@view_required
def quality_settings(request: HttpRequest) -> HttpResponse:
    """chatcli's ``/config quality``: the effective quality settings, read-only."""

    return render(request, "lessonboard/quality.html", {"groups": quality.effective()})
