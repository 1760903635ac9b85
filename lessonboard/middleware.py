"""Security middleware: a strict CSP, a same-origin check for unsafe requests, and login-by-default."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseForbidden, JsonResponse
from django.shortcuts import resolve_url
from django.utils.cache import add_never_cache_headers

from lessonboard.inputs import unstorable_reason

# No inline script or style anywhere; htmx is told (base.html's htmx-config meta) not to inject its
# indicator <style> and never to eval.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'; form-action 'self'"
)

# Paths anyone may reach: health for probes, metrics (which checks its own bearer token or address),
# the login page itself, static files, and the token-authenticated API and MCP endpoint (which answer
# 401 JSON themselves).
TOKEN_PREFIXES = ("/api/", "/mcp")
PUBLIC_PREFIXES = ("/favicon.ico", "/healthz", "/readyz", "/metrics", "/accounts/login/", "/static/", *TOKEN_PREFIXES)


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
            if site == "cross-site" and not request.path.startswith(TOKEN_PREFIXES):
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


class NoStoreForAuthenticatedMiddleware:
    """What a logged-in user or an agent token sees must not stay in a browser's or a proxy's cache
    (``Cache-Control: no-store``); the login page, health probes and static files are unaffected."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        user = getattr(request, "user", None)
        if (user is not None and user.is_authenticated) or "Authorization" in request.headers:
            add_never_cache_headers(response)
        return response


class ReadableNotAllowedMiddleware:
    """Django's ``require_POST`` answers a GET with an empty 405; a person who opened an action URL gets a
    page saying what the address is for instead (the API keeps its bare status)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code == 405
            and not response.streaming
            and not response.content
            and not request.path.startswith(TOKEN_PREFIXES)
        ):
            from lessonboard.views import method_not_allowed

            allowed = [m.strip() for m in response.get("Allow", "POST").split(",") if m.strip()]
            return method_not_allowed(request, allowed)
        return response


class RefuseUnstorableInputMiddleware:
    """A NUL character (or a lone surrogate) in the URL path, the query string or a form field is a 400
    naming the field, before any view runs (docs/api.md#input-policy): PostgreSQL cannot store it, and a
    page filter or an operator's reason must fail before its action, never after. JSON API bodies are
    checked by ``lessonboard.api.json_body``."""

    FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        refused = self._refused(request)
        if refused is not None:
            field, message = refused
            if request.path.startswith("/api/"):
                return JsonResponse({"error": message, "field": field}, status=400)
            return HttpResponseBadRequest(f"Bad request: {message}.\n", content_type="text/plain; charset=utf-8")
        return self.get_response(request)

    def _refused(self, request: HttpRequest) -> tuple[str, str] | None:
        reason = unstorable_reason(request.path)
        if reason is not None:
            return "path", f"the URL path {reason}"
        sources = [request.GET]
        if (
            request.method == "POST"
            and not request.path.startswith("/api/")
            and request.content_type in self.FORM_TYPES
        ):
            sources.append(request.POST)
        for source in sources:
            for key, values in source.lists():
                for text in (key, *values):
                    reason = unstorable_reason(text)
                    if reason is not None:
                        field = key if unstorable_reason(key) is None else "?"
                        return field, f"the field '{field}' {reason}"
        return None
