from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from lessonboard import health
from lessonboard.permissions import view_required
from lessonboard.roles import roles_of


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
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers (and the admin's pages, which do not link one) ask for /favicon.ico: the static SVG."""
    return redirect(static("favicon.svg"), permanent=True)


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
