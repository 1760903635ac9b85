"""JSON API plumbing shared by every app: bearer-token auth with scopes, JSON bodies and errors.

Errors always answer JSON ``{"error": "...", "field": "..."}`` with a 4xx status, never an HTML page.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from lessonboard.models import AgentToken
from lessonboard.tokens import authenticate, authenticate_offline


class ApiError(Exception):
    """Raise from an API view to answer ``status`` with a JSON body naming the offending field."""

    def __init__(self, message: str, *, status: int = 400, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.field = field

    def response(self) -> JsonResponse:
        body: dict[str, Any] = {"error": self.message}
        if self.field:
            body["field"] = self.field
        return JsonResponse(body, status=self.status)


def error(message: str, *, status: int = 400, field: str | None = None) -> JsonResponse:
    return ApiError(message, status=status, field=field).response()


class ApiRequest(HttpRequest):
    agent_token: AgentToken


def api_view(
    scope: str, methods: tuple[str, ...] = ("POST",)
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Token-authenticated JSON endpoint: 401 for a missing/invalid/revoked token, 403 for a wrong scope,
    405 for a wrong method; ``ApiError`` raised inside becomes its JSON response."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @csrf_exempt  # bearer tokens, not cookies: no ambient credential to forge
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            header = request.headers.get("Authorization", "")
            scheme, _, credential = header.partition(" ")
            if scheme.lower() != "bearer" or not credential.strip():
                return _unauthorized("missing bearer token (Authorization: Bearer <token>)")
            offline = False
            try:
                token = authenticate(credential.strip())
            except DatabaseError:
                # The database is down: a token verified recently may still ingest (the WAL keeps the
                # trigger durable); anything else answers 503, never a 500.
                token = authenticate_offline(credential.strip())
                offline = True
                if token is None:
                    return error("the database is unavailable; retry shortly", status=503)
            if token is None:
                return _unauthorized("invalid token")
            if token.is_revoked:
                return _unauthorized("token revoked")
            if not token.has_scope(scope):
                return error(f"token lacks the '{scope}' scope", status=403)
            if request.method not in methods:
                response = error(f"method {request.method} not allowed", status=405)
                response["Allow"] = ", ".join(methods)
                return response
            if not offline:
                token.touch()
            request.agent_token = token  # type: ignore[attr-defined]
            try:
                return view(request, *args, **kwargs)
            except ApiError as exc:
                return exc.response()
            except DatabaseError:
                # An endpoint that needs the database while it is down: say so, never a 500.
                return error("the database is unavailable; retry shortly", status=503)

        return wrapper

    return decorator


def _unauthorized(message: str) -> JsonResponse:
    response = error(message, status=401)
    response["WWW-Authenticate"] = 'Bearer realm="lessonboard"'
    return response


def json_body(request: HttpRequest, *, max_bytes: int | None = None) -> dict[str, Any]:
    """The request's JSON object, or ``ApiError`` (400 bad JSON / not an object, 413 too large)."""
    if max_bytes is not None:
        length = request.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > max_bytes:
            raise ApiError(f"body larger than {max_bytes} bytes", status=413, field="body")
    try:
        raw = request.body
    except Exception as exc:  # RequestDataTooBig from DATA_UPLOAD_MAX_MEMORY_SIZE
        raise ApiError(f"body too large: {exc}", status=413, field="body") from exc
    if max_bytes is not None and len(raw) > max_bytes:
        raise ApiError(f"body larger than {max_bytes} bytes", status=413, field="body")
    try:
        data = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(f"body is not valid JSON: {exc}", field="body") from exc
    if not isinstance(data, dict):
        raise ApiError("body must be a JSON object", field="body")
    return data


def require_str(data: dict[str, Any], field: str, *, required: bool = True, max_length: int | None = None) -> str:
    value = data.get(field)
    if value is None or value == "":
        if required:
            raise ApiError(f"'{field}' is required", field=field)
        return ""
    if not isinstance(value, str):
        raise ApiError(f"'{field}' must be a string", field=field)
    if max_length is not None and len(value) > max_length:
        raise ApiError(f"'{field}' is longer than {max_length} characters", field=field)
    return value
