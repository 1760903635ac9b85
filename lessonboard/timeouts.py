"""Statement timeouts per request class (docs/api.md#limits): the queries of a retrieve call, a list page
or a search run under PostgreSQL's ``statement_timeout`` for that class, so one costly request answers a
503 naming the limit instead of holding a web thread (and a database backend) for seconds.

``with statement_timeout("retrieve"): …`` gives the block's queries one budget of database time: each
runs under ``SET LOCAL statement_timeout`` = what the earlier ones left of it, inside a transaction (a savepoint when one is already
open); the previous value comes back when the block ends. A cancelled query, or one due after the budget
is spent, becomes ``StatementTimeout``: an ``ApiError`` (503, JSON naming the setting) for the API, and a
friendly 503 page for the site (``StatementTimeoutMiddleware``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from lessonboard.api import ApiError

# request class -> (the Django setting, the environment variable that sets it)
CLASSES: dict[str, tuple[str, str]] = {
    "retrieve": ("STATEMENT_TIMEOUT_RETRIEVE", "LESSONBOARD_STATEMENT_TIMEOUT_RETRIEVE"),
    "list": ("STATEMENT_TIMEOUT_LIST", "LESSONBOARD_STATEMENT_TIMEOUT_LIST"),
    "search": ("STATEMENT_TIMEOUT_SEARCH", "LESSONBOARD_STATEMENT_TIMEOUT_SEARCH"),
}
QUERY_CANCELED = "57014"  # SQLSTATE of a statement cancelled by statement_timeout (or a cancel request)


def timeout_ms(request_class: str) -> int:
    return round(float(getattr(settings, CLASSES[request_class][0])) * 1000)


class StatementTimeout(ApiError):
    """A query of ``request_class`` ran past its statement timeout."""

    def __init__(self, request_class: str, ms: int) -> None:
        self.request_class = request_class
        self.timeout_ms = ms
        self.setting = CLASSES[request_class][1]
        super().__init__(
            f"this {request_class} request would take longer than its {ms} ms statement timeout ({self.setting}); "
            "narrow it (fewer or more common words, a workspace, a filter) rather than retrying it as is",
            status=503,
        )

    def response(self) -> JsonResponse:
        body = {"error": self.message, "limit": self.setting, "timeout_ms": self.timeout_ms}
        return JsonResponse(body, status=503)


def _cancelled(exc: BaseException) -> bool:
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) == QUERY_CANCELED or getattr(cause, "pgcode", None) == QUERY_CANCELED


@contextmanager
def statement_timeout(request_class: str, *, using: str = "default") -> Iterator[None]:
    """Run the block's queries within ``request_class``'s budget of database time (0 or less: none). The
    budget is for all the block's queries together, not each: every query runs under ``statement_timeout``
    = what the earlier ones left, and a query due after the budget is spent is not sent at all. (Time
    outside the database, such as embedding the query, does not count.)"""
    ms = timeout_ms(request_class)
    if ms <= 0 or connection.vendor != "postgresql":
        yield
        return
    spent = [0.0]  # seconds the block's queries have taken so far
    inside = threading.local()

    def budget(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        if getattr(inside, "busy", False):
            return execute(sql, params, many, context)
        left = ms - int(spent[0] * 1000)
        if left <= 0:
            raise StatementTimeout(request_class, ms)
        inside.busy = True
        try:
            with context["connection"].cursor() as cur:
                cur.execute("SELECT set_config('statement_timeout', %s, true)", [f"{left}ms"])
        finally:
            inside.busy = False
        started = time.monotonic()
        try:
            return execute(sql, params, many, context)
        finally:
            spent[0] += time.monotonic() - started

    try:
        with transaction.atomic(using=using):
            with connection.cursor() as cur:
                cur.execute("SELECT current_setting('statement_timeout')")
                previous = cur.fetchone()[0]
            with connection.execute_wrapper(budget):
                yield
            # Inside an outer transaction the SET LOCAL would outlive the block: put the old value back.
            # (After an error the savepoint's rollback undoes it.)
            with connection.cursor() as cur:
                cur.execute("SELECT set_config('statement_timeout', %s, true)", [previous])
    except OperationalError as exc:
        if _cancelled(exc):
            raise StatementTimeout(request_class, ms) from exc
        raise


class StatementTimeoutMiddleware:
    """A page whose query ran past its statement timeout answers a friendly 503 (the API answers JSON:
    ``StatementTimeout`` is an ``ApiError``, which ``api_view`` turns into its response)."""

    def __init__(self, get_response: object) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)  # type: ignore[operator, no-any-return]

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, StatementTimeout):
            return None
        if request.path.startswith("/api/"):
            return exception.response()
        context = {"request_class": exception.request_class, "ms": exception.timeout_ms, "setting": exception.setting}
        if getattr(request, "htmx", False):
            # htmx swaps no 5xx answer: the live results get the message (200) and the limit in a header.
            response = render(request, "too_costly.html#message", context)
            response["X-Lessonboard-Limit"] = exception.setting
            return response
        return render(request, "too_costly.html", context, status=503)
