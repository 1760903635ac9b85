from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from lessonboard import health
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
