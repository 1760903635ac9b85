"""Security middleware: a strict CSP, a same-origin check for unsafe requests, and login-by-default."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import resolve_url

# No inline script or style anywhere; htmx is told (base.html's htmx-config meta) not to inject its
# indicator <style> and never to eval.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'; form-action 'self'"
)

# Paths anyone may reach: health for probes, metrics for Prometheus (bind it to a private network),
# the login page itself, static files, and the token-authenticated API (which answers 401 JSON itself).
PUBLIC_PREFIXES = ("/healthz", "/readyz", "/metrics", "/accounts/login/", "/static/", "/api/")


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", CSP)
        response.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        return response


class SameOriginUnsafeRequestMiddleware:
    """Refuse state-changing requests a browser marks as cross-site (defence in depth beside CSRF)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method not in ("GET", "HEAD", "OPTIONS", "TRACE"):
            site = request.headers.get("Sec-Fetch-Site")
            if site == "cross-site" and not request.path.startswith("/api/"):
                return HttpResponseForbidden("cross-site request refused")
        return self.get_response(request)


class LoginRequiredMiddleware:
    """Every page needs a logged-in user unless its path is public (see ``PUBLIC_PREFIXES``)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.user.is_authenticated and not request.path.startswith(PUBLIC_PREFIXES):
            if request.path.startswith("/admin/"):
                return self.get_response(request)  # the admin has its own login page
            if getattr(request, "htmx", False):
                response = JsonResponse({"error": "login required"}, status=401)
                response["HX-Redirect"] = resolve_url(settings.LOGIN_URL)
                return response
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        return self.get_response(request)
