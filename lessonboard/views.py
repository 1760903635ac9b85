from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from lessonboard import breaker, charts, dependencies, health, inbox, llm, overview
from lessonboard.llm import ratelimit
from lessonboard.models import AuditEvent, WorkerHeartbeat
from lessonboard.permissions import needs_role, require_perm, view_required
from lessonboard.roles import roles_of
from lessonboard.tasks import heartbeat


def _overview_context(request: HttpRequest) -> dict[str, object]:
    return {
        "groups": overview.collect(),
        "workers": WorkerHeartbeat.objects.all()[:20],
        "llm_configured": llm.is_configured(),
        "llm_status": llm.status_text(),
        "llm_outage": breaker.outage(),
        "llm_pause": ratelimit.current(),
        "can_operate": request.user.has_perm("lessonboard.operate_queue"),
    }


@require_GET
@view_required
def overview_page(request: HttpRequest) -> HttpResponse:
    template = "lessonboard/overview.html#counts" if request.htmx else "lessonboard/overview.html"  # type: ignore[attr-defined]
    context = _overview_context(request)
    if not request.htmx:  # type: ignore[attr-defined]
        context.update(_charts_context(request))
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
    """Everything waiting for a person (``lessonboard.inbox``); htmx polls the list."""
    items = inbox.items_for(request.user)
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


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    ok, checks = health.run_checks()
    status = ("degraded" if health.degraded(checks) else "ready") if ok else "not ready"
    return JsonResponse({"status": status, "checks": checks}, status=200 if ok else 503)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404: JSON under /api/ (agents parse it), the HTML page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": f"no API endpoint at {request.path}"}, status=404)
    return render(request, "404.html", status=404)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """403 naming the role needed (from ``require_perm``) and the role the user has."""
    needed = str(exception) if exception is not None and str(exception) else ""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": needed or "forbidden"}, status=403)
    context = {"needed": needed, "your_roles": roles_of(request.user)}
    return render(request, "403.html", context, status=403)


def method_not_allowed(request: HttpRequest, allowed: list[str]) -> HttpResponse:
    """405 for a GET on an action URL (a bookmarked or pasted link): a page saying what the URL is for."""
    response = render(request, "405.html", {"allowed": allowed}, status=405)
    response["Allow"] = ", ".join(allowed)
    return response


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "internal error; it has been logged"}, status=500)
    return render(request, "500.html", status=500)


@require_GET
@view_required
def quality_settings(request: HttpRequest) -> HttpResponse:
    """chatcli's ``/config quality``: the effective quality settings, read-only."""
    from lessonboard import quality

    return render(request, "lessonboard/quality.html", {"groups": quality.effective()})


@require_GET
@view_required
def usage_page(request: HttpRequest) -> HttpResponse:
    """What the LLM calls cost (lessonboard.llm.usage): per workspace, agent, purpose and model over a window,
    and the latest calls. Read-only, like the other logs."""
    from datetime import timedelta

    from django.db.models import Avg, Count, Q, Sum
    from django.utils import timezone

    from lessonboard.models import LLMCall

    try:
        days = min(max(int(request.GET.get("days", "7")), 1), 90)
    except ValueError:
        days = 7
    since = timezone.now() - timedelta(days=days)
    calls = LLMCall.objects.filter(created_at__gte=since)
    totals = dict(
        calls=Count("id"),
        prompt=Sum("prompt_tokens"),
        completion=Sum("completion_tokens"),
        estimated=Count("id", filter=Q(tokens_estimated=True)),
        cost=Sum("cost"),
        latency=Avg("latency_ms"),
        failed=Count("id", filter=~Q(outcome__in=["ok", "truncated"])),
    )
    groups = [
        (title, list(calls.values(*fields).annotate(**totals).order_by(*fields)[:100]))
        for title, fields in (
            ("By workspace and agent", ("workspace", "agent")),
            ("By purpose and model", ("purpose", "model")),
            ("By prompt version", ("prompt_name", "prompt_version")),
        )
    ]
    context = {"days": days, "overall": calls.aggregate(**totals), "groups": groups, "latest": calls[:50]}
    return render(request, "lessonboard/usage.html", context)
