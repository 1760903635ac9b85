"""``/mcp``: the MCP server (``console.mcp.tools``) behind Django, over Streamable HTTP.

The SDK's transport is an ASGI app; the web stack is WSGI (gunicorn). Each request is stateless (one
JSON-RPC message in, its JSON answer out), so the bridge is small: authenticate the bearer token the way
the JSON API does, then run the SDK's stateless session manager for this one request inside
``async_to_sync`` and collect what it sends. Tools reach the ORM through ``sync_to_async`` on this same
thread, so they see the request's database connection.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from console.mcp.tools import current_token, server
from lessonboard.api import ApiError, bearer_token, too_large
from lessonboard.models import TokenScope

# Django already checks the Host header (ALLOWED_HOSTS) and a bearer token is required: there is no
# ambient credential a rebinding page could use, so the SDK's own Host/Origin check stays off.
_SECURITY = TransportSecuritySettings(enable_dns_rebinding_protection=False)


@csrf_exempt  # bearer tokens, not cookies
def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    try:
        # Every tool needs at least ``ingest`` (each checks its own scope too): a metrics-only token, which
        # may read /metrics and nothing else, is refused here.
        token, offline = bearer_token(request, TokenScope.INGEST)
    except ApiError as exc:
        return exc.response()
    if request.method not in ("POST", "GET", "DELETE"):
        response = HttpResponse(status=405)
        response["Allow"] = "POST, GET, DELETE"
        return response
    body = request.body
    if len(body) > settings.MCP_MAX_BODY:
        return too_large(settings.MCP_MAX_BODY, "LESSONBOARD_MCP_MAX_BODY").response()
    if not offline:
        token.touch()
    reset = current_token.set(token)
    try:
        status, headers, content = async_to_sync(_serve)(request, body)
    finally:
        current_token.reset(reset)
    response = HttpResponse(content, status=status)
    for name, value in headers:
        if name.lower() not in ("content-length", "transfer-encoding", "connection"):
            response[name] = value
    return response


mcp_endpoint.required_scope = TokenScope.INGEST  # type: ignore[attr-defined]  # read by the permission matrix


async def _serve(request: HttpRequest, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "query_string": request.META.get("QUERY_STRING", "").encode(),
        "root_path": "",
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1", "replace"))
            for name, value in request.headers.items()
        ],
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
        "server": (request.get_host(), 0),
    }
    sent_body = False
    status = 500
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []

    async def receive() -> MutableMapping[str, Any]:
        nonlocal sent_body
        if sent_body:
            return {"type": "http.disconnect"}
        sent_body = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            headers.extend((k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    manager = StreamableHTTPSessionManager(
        app=server._lowlevel_server,  # MCPServer offers its app only inside its own ASGI factory
        stateless=True,
        json_response=True,
        security_settings=_SECURITY,
        max_request_body_size=settings.MCP_MAX_BODY,
    )
    async with manager.run():
        await manager.handle_request(scope, receive, send)
    return status, headers, b"".join(chunks)
