"""The OpenAPI 3.1 document of the JSON API (``GET /api/v1/openapi.json``, docs/api.md#openapi).

Generated, never written by hand: the paths come from the URL configuration, and each operation from the
``Described`` its ``api_view`` carries — the same pydantic models the view validates its request with, and
the models of its answers. An ``/api/v1/`` endpoint without a description fails the build of the document
(and the suite), so a new endpoint cannot be left out.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from lessonboard.api import Described
from lessonboard.schemas import ErrorBody

API_PREFIX = "api/v1/"
REF = "#/components/schemas/{model}"
# Every endpoint can answer these (bad input or a NUL in the query string; the token; an outage).
COMMON_ERRORS = {
    400: "Bad input: the body, a parameter or a value is refused; `field` names it",
    401: "Missing, invalid or revoked token",
    403: "The token lacks the scope, or may not name that workspace",
    503: "The database (or the lesson queue) is unavailable; retry shortly",
}
STATUS_TEXT = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    404: "Not found",
    409: "Conflict with the workspace's state",
    413: "Body too large",
    422: "Refused by validation",
    502: "The model failed",
}
# What Django's path converters accept, as JSON Schema.
CONVERTERS = {
    "int": {"type": "integer", "minimum": 0},
    "str": {"type": "string", "pattern": "^[^/]+$"},
    "slug": {"type": "string", "pattern": "^[-a-zA-Z0-9_]+$"},
    "uuid": {"type": "string", "format": "uuid"},
    "path": {"type": "string"},
}
PARAMETER = re.compile(r"<(?:(\w+):)?(\w+)>")


def api_routes() -> Iterator[tuple[str, str | None, Callable[..., Any]]]:
    """``(route, url name, view)`` of every ``/api/v1/`` URL in the URL configuration."""

    def walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, str | None, Callable[..., Any]]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                route = prefix + str(pattern.pattern)
                if route.startswith(API_PREFIX):
                    yield route, pattern.name, pattern.callback

    yield from walk(get_resolver().url_patterns, "")


@functools.cache
def document() -> dict[str, Any]:
    """The document, built once per process (the models and the URLs do not change while it runs)."""
    routes = list(api_routes())
    undescribed = [route for route, _, view in routes if getattr(view, "described", None) is None]
    if undescribed:
        raise LookupError(f"API endpoints without an OpenAPI description (api_view(describe=…)): {undescribed}")
    refs, schemas = _components([getattr(view, "described") for _, _, view in routes])  # noqa: B009
    paths: dict[str, Any] = {}
    for route, name, view in routes:
        path, parameters = _path(route)
        methods: tuple[str, ...] = getattr(view, "allowed_methods")  # noqa: B009 - set by api_view
        for method in methods:
            operation_id = (name or path) if len(methods) == 1 else f"{name or path}-{method.lower()}"
            paths.setdefault(path, {})[method.lower()] = _operation(view, method, operation_id, parameters, refs)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lessonboard API",
            "version": "1",
            "description": "Agents report results and read lessons. Every endpoint needs an agent token "
            "(`Authorization: Bearer <token>`) with the scope the operation names; errors are JSON "
            '`{"error": "...", "field": "..."}` (docs/api.md).',
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An agent token (`manage.py create_agent_token`), with the scope each operation names",
                }
            },
        },
        "security": [{"bearer": []}],
    }


def _components(described: list[Described]) -> tuple[dict[type[BaseModel], dict[str, str]], dict[str, Any]]:
    models: list[type[BaseModel]] = [ErrorBody]
    for item in described:
        models += list(item.body)
        for answer in item.responses.values():
            models += list(answer) if isinstance(answer, tuple) else [answer]
    unique = list(dict.fromkeys(models))
    keys, top = models_json_schema([(m, "validation") for m in unique], ref_template=REF)
    return {m: keys[(m, "validation")] for m in unique}, top.get("$defs", {})


def _path(route: str) -> tuple[str, list[dict[str, Any]]]:
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": CONVERTERS[converter or "str"]}
        for converter, name in PARAMETER.findall(route)
    ]
    return "/" + PARAMETER.sub(lambda m: "{" + m.group(2) + "}", route), parameters


def _one_of(models: type[BaseModel] | tuple[type[BaseModel], ...], refs: dict[type[BaseModel], Any]) -> Any:
    if isinstance(models, tuple):
        return refs[models[0]] if len(models) == 1 else {"anyOf": [refs[m] for m in models]}
    return refs[models]


def _json(schema: Any, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _operation(
    view: Any, method: str, operation_id: str, path_parameters: list[dict[str, Any]], refs: dict[type[BaseModel], Any]
) -> dict[str, Any]:
    described: Described = view.described
    scope = view.required_scope
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "summary": described.summary,
        "description": f"Needs a token with the `{scope}` scope.",
        "security": [{"bearer": []}],
        "x-scope": scope,
    }
    parameters = [{**p, "schema": described.path.get(p["name"], p["schema"])} for p in path_parameters]
    if method == "GET" and described.query is not None:
        parameters += _query_parameters(described.query)
    if parameters:
        operation["parameters"] = parameters
    takes_body = method == "POST" and bool(described.body)
    if takes_body:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _one_of(described.body, refs)}},
        }
    responses: dict[str, Any] = {}
    for status, models in sorted(described.responses.items()):
        responses[str(status)] = _json(_one_of(models, refs), STATUS_TEXT.get(status, COMMON_ERRORS.get(status, "")))
        if status in described.links:
            responses[str(status)]["links"] = described.links[status]
    errors = dict(COMMON_ERRORS)
    if takes_body:
        errors[413] = STATUS_TEXT[413]
    if path_parameters:
        errors[404] = "No such object, or the path does not match"
    for status in described.errors:
        errors.setdefault(status, STATUS_TEXT.get(status, "Error"))
    for status, text in sorted(errors.items()):
        responses.setdefault(str(status), _json(refs[ErrorBody], described.error_text.get(status, text)))
    responses["401"]["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"}}}
    if method == "GET" and described.query:
        # A query string past the web server's request-line limit never reaches Django: gunicorn answers
        # 414 itself, as plain HTML (limit_request_line, 4,094 bytes by default).
        responses["414"] = {
            "description": "URI too long: the web server's limit on the request line",
            "content": {"text/html": {"schema": {"type": "string"}}},
        }
    operation["responses"] = dict(sorted(responses.items()))
    return operation


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=REF)
    required = set(schema.get("required", ()))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": prop}
        for name, prop in schema.get("properties", {}).items()
    ]
