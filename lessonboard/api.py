"""JSON API plumbing shared by every app: bearer-token auth with scopes, JSON bodies and errors.

Errors always answer JSON ``{"error": "...", "field": "..."}`` with a 4xx status, never an HTML page.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, DataError, IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel

from lessonboard import inputs
from lessonboard.models import AgentToken, AuditEvent, Workspace
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


@dataclass(frozen=True)
class Described:
    """What ``lessonboard.openapi`` says about an endpoint: the models its view validates with and answers
    with. ``body`` is the POST body (several models: any one of them), ``query`` the GET query string,
    ``responses`` the answers by status (several models: any one of them), ``errors`` the statuses beyond
    those every endpoint can answer (400, 401, 403, 503; 413 with a body; 404 with a path parameter)."""

    summary: str
    body: tuple[type[BaseModel], ...] = ()
    query: type[BaseModel] | None = None
    responses: dict[int, type[BaseModel] | tuple[type[BaseModel], ...]] = field(default_factory=dict)
    errors: tuple[int, ...] = ()
    # JSON Schema of a path parameter narrower than its URL converter says (the values that can exist).
    path: dict[str, dict[str, Any]] = field(default_factory=dict)
    # OpenAPI links by status: how an answer feeds the next call (a fuzzer's stateful phase follows them).
    links: dict[int, dict[str, Any]] = field(default_factory=dict)
    # What an error status means for this endpoint, where it says more than the common text.
    error_text: dict[int, str] = field(default_factory=dict)


def api_view(
    scope: str, methods: tuple[str, ...] = ("POST",), *, describe: Described | None = None
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Token-authenticated JSON endpoint: 401 for a missing/invalid/revoked token, 403 for a wrong scope,
    405 for a wrong method; ``ApiError`` raised inside becomes its JSON response. ``describe`` is the
    endpoint's entry in the OpenAPI document (every ``/api/v1/`` endpoint needs one: a test checks)."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @csrf_exempt  # bearer tokens, not cookies: no ambient credential to forge
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                token, offline = bearer_token(request, scope)
            except ApiError as exc:
                return exc.response()
            if request.method not in methods:
                response = error(f"method {request.method} not allowed", status=405)
                response["Allow"] = ", ".join(methods)
                return response
            if not offline:
                token.touch()
            request.agent_token = token  # type: ignore[attr-defined]
            return answered(view, request, *args, **kwargs)

        wrapper.api_view = view  # type: ignore[attr-defined]  # the undecorated view, for call_view()
        wrapper.required_scope = scope  # type: ignore[attr-defined]  # read by call_view and the permission matrix
        wrapper.allowed_methods = methods  # type: ignore[attr-defined]  # read by lessonboard.openapi
        wrapper.described = describe  # type: ignore[attr-defined]
        return wrapper

    return decorator


class Unauthorized(ApiError):
    """401 with ``WWW-Authenticate``: no token, an unknown one, or a revoked one."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=401)

    def response(self) -> JsonResponse:
        response = super().response()
        response["WWW-Authenticate"] = 'Bearer realm="lessonboard"'
        return response


def bearer_token(request: HttpRequest, scope: str | None) -> tuple[AgentToken, bool]:
    """The request's agent token and whether it was verified offline (database down), or ``ApiError``:
    401 for a missing/invalid/revoked token, 403 when ``scope`` is given and the token lacks it, 503 when
    the database is down and the token was not verified recently."""
    header = request.headers.get("Authorization", "")
    kind, _, credential = header.partition(" ")
    if kind.lower() != "bearer" or not credential.strip():
        raise Unauthorized("missing bearer token (Authorization: Bearer <token>)")
    offline = False
    try:
        token = authenticate(credential.strip())
    except DatabaseError:
        # The database is down: a token verified recently may still ingest (the WAL keeps the
        # trigger durable); anything else answers 503, never a 500.
        token = authenticate_offline(credential.strip())
        offline = True
        if token is None:
            raise ApiError("the database is unavailable; retry shortly", status=503) from None
    if token is None:
        raise Unauthorized("invalid token")
    if token.is_revoked:
        raise Unauthorized("token revoked")
    if scope is not None and not token.has_scope(scope):
        raise ApiError(f"token lacks the '{scope}' scope", status=403)
    return token, offline


def answered(view: Callable[..., HttpResponse], request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """The view's response, or its error as the API answers it (never a 500 for the caller's input)."""
    try:
        return view(request, *args, **kwargs)
    except ApiError as exc:
        return exc.response()
    except inputs.BadInput as exc:
        return error(exc.message, field=exc.field)
    except DataError as exc:
        # A value the database refuses (out of range, bad text) is the caller's input, not an
        # outage: a 503 would invite endless retries of a request that can never succeed.
        return error(f"a value in the request cannot be stored: {exc}".strip(), field="body")
    except DatabaseError as exc:
        if str(getattr(exc.__cause__, "sqlstate", "") or "").startswith("54"):
            # Program limit exceeded (a word, an array or a statement too big for PostgreSQL): the request's
            # own size, which a retry would not change.
            return error("a value in the request is too large for the database", field="body")
        # An endpoint that needs the database while it is down: say so, never a 500.
        return error("the database is unavailable; retry shortly", status=503)


def call_view(view: Callable[..., HttpResponse], token: AgentToken, data: dict[str, Any]) -> tuple[int, Any]:
    """Run an ``@api_view`` endpoint in-process for ``token`` with ``data`` as its JSON body:
    ``(status, decoded JSON body)``. The scope check, the validation and the domain call are the
    endpoint's own, so another front door (the MCP tools) cannot drift from the HTTP API."""
    scope: str = view.required_scope  # type: ignore[attr-defined]
    if not token.has_scope(scope):
        return 403, {"error": f"token lacks the '{scope}' scope"}
    body = json.dumps(data).encode()
    request = HttpRequest()
    request.method = "POST"
    request.META = {"CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body))}
    request._body = body  # HttpRequest.body reads this
    request.agent_token = token  # type: ignore[attr-defined]
    response = answered(view.api_view, request)  # type: ignore[attr-defined]
    return response.status_code, json.loads(response.content or b"null")


def check_workspace(token: AgentToken, slug: str) -> None:
    """403 naming ``workspace`` when a token bound to workspaces names another one."""
    if not token.may_name(slug):
        raise ApiError(
            f"this token is bound to workspace(s) {', '.join(token.workspaces)}; it may not name {slug!r}",
            status=403,
            field="workspace",
        )


def workspace_for(token: AgentToken, slug: str) -> Workspace:
    """The workspace an agent names, created on first sight only when the token may create one
    (a full token, or an ingest token with ``may_create_workspaces``); creation is audited."""
    check_workspace(token, slug)
    workspace = Workspace.objects.filter(slug=slug).first()
    if workspace is not None:
        return workspace
    if not token.may_create(slug):
        raise ApiError(
            f"unknown workspace {slug!r}, and this token may not create workspaces "
            "(an admin creates it, or allows the token to)",
            status=403,
            field="workspace",
        )
    try:
        with transaction.atomic():
            workspace = Workspace.objects.create(slug=slug, name=slug)
    except IntegrityError:  # another request created it first
        return Workspace.objects.get(slug=slug)
    AuditEvent.record("workspace.create", token=token, object_type="workspace", object_ids=[workspace.pk])
    return workspace


def too_large(limit: int, setting: str | None = None) -> ApiError:
    """The 413: the limit in bytes, and the setting that changes it (or that it is this endpoint's own)."""
    how = f"set {setting} to change it" if setting else "a fixed limit of this endpoint (docs/api.md#limits)"
    return ApiError(f"body larger than the limit of {limit} bytes ({how})", status=413, field="body")


def named_workspace(token: AgentToken, slug: str | None, *, create: bool = True) -> Workspace | None:
    """The workspace a request names, or ``None`` (the workspace-less pool) when it names none. A token
    bound to workspaces may not use that pool: 400 naming ``workspace`` (docs/security.md#tenancy-and-the-gate).
    ``create=False`` (reads) never creates one: an unknown workspace is ``None`` after the binding check."""
    if not slug:
        if token.workspaces:
            raise ApiError("'workspace' is required for a token bound to workspaces", field="workspace")
        return None
    if create:
        return workspace_for(token, slug)
    check_workspace(token, slug)
    return Workspace.objects.filter(slug=slug).first()


def json_body(
    request: HttpRequest, *, max_bytes: int | None = None, keep_text: bool = False, setting: str | None = None
) -> dict[str, Any]:
    """The request's JSON object, or ``ApiError`` (400 bad JSON / not an object / refused by the input
    policy of ``lessonboard.inputs``, naming the field; 413 too large, with the limit in bytes and
    ``setting``, the environment variable that sets it, when there is one). ``keep_text`` leaves NUL and
    lone surrogates in strings for an endpoint whose text goes into the WAL."""
    if max_bytes is not None:
        length = request.headers.get("Content-Length")
        if length and length.isascii() and length.isdigit() and int(length) > max_bytes:
            raise too_large(max_bytes, setting)
    try:
        raw = request.body
    except Exception as exc:  # RequestDataTooBig from DATA_UPLOAD_MAX_MEMORY_SIZE
        raise too_large(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) from exc
    if max_bytes is not None and len(raw) > max_bytes:
        raise too_large(max_bytes, setting)
    try:
        data = inputs.parse_json(raw or b"null", keep_text=keep_text)
    except inputs.BadInput as exc:
        raise ApiError(exc.message, field=exc.field) from exc
    if not isinstance(data, dict):
        raise ApiError("body must be a JSON object", field="body")
    return data
