"""Prometheus: the project's own series and the ``/metrics`` view.

Multiprocess mode: gunicorn workers and Celery worker processes each write their samples to files in
``PROMETHEUS_MULTIPROC_DIR`` (cleaned by ``serve`` at start); ``/metrics`` aggregates all of them, plus
``python_info`` of the serving process.
"""

from __future__ import annotations

import ipaddress
import os

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest, multiprocess
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.registry import Collector

WORKER_HEARTBEATS = Counter("lessonboard_worker_heartbeats_total", "Heartbeat tasks run by Celery workers.", ["node"])
LLM_BREAKER_TRIPS = Counter("lessonboard_llm_breaker_trips_total", "Times the LLM breaker opened (an outage began).")
LLM_BREAKER_RECOVERIES = Counter("lessonboard_llm_breaker_recoveries_total", "Times the LLM breaker closed again.")
LLM_CALLS_IN_FLIGHT = Gauge(
    "lessonboard_llm_calls_in_flight",
    "LLM chat calls holding one of the node's slots now (LESSONBOARD_LLM_CONCURRENCY bounds them).",
    multiprocess_mode="livesum",
)
LLM_SATURATED = Counter(
    "lessonboard_llm_saturated_total", "LLM calls refused or given up because every slot of the node was in use."
)
LLM_CALLS = Counter(
    "lessonboard_llm_calls_total",
    "LLM chat calls made, by purpose, model and outcome.",
    ["purpose", "model", "outcome"],
)
LLM_TOKENS = Counter(
    "lessonboard_llm_tokens_total",
    "Tokens of LLM chat calls (from the answer's usage, else estimated), by purpose, model and kind.",
    ["purpose", "model", "kind"],
)
LLM_COST = Counter(
    "lessonboard_llm_cost_total",
    "Cost of LLM chat calls from LESSONBOARD_LLM_PRICES, by purpose and model.",
    ["purpose", "model"],
)
LLM_CONCURRENCY_CUTS = Counter(
    "lessonboard_llm_concurrency_cuts_total",
    "Times the node's adaptive LLM concurrency was cut (a rate-limit answer or a timeout).",
)
LLM_RATE_LIMITS = Counter(
    "lessonboard_llm_rate_limits_total", "Rate-limit answers from the LLM (429, or 503 with Retry-After)."
)

# Collectors whose values are computed at scrape time (e.g. gauges read from the WAL and the database,
# which a per-process gauge cannot get right across processes). Apps append from AppConfig.ready().
EXTRA_COLLECTORS: list[Collector] = []


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(reg)
    else:  # pragma: no cover - single-process use (a shell); serve and tests always set the dir
        from prometheus_client import REGISTRY

        return REGISTRY
    PlatformCollector(registry=reg)
    for collector in EXTRA_COLLECTORS:
        reg.register(collector)
    return reg


def scrape_allowed(request: HttpRequest) -> bool:
    """A bearer token with the ``metrics`` scope (Prometheus' ``authorization`` block), or a request from
    an address in ``LESSONBOARD_METRICS_ALLOWED_ADDRESSES`` (docs/security.md#metrics)."""
    from lessonboard.login import client_address
    from lessonboard.models import TokenScope
    from lessonboard.tokens import authenticate, authenticate_offline

    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credential.strip():
        try:
            token = authenticate(credential.strip())
        except DatabaseError:
            token = authenticate_offline(credential.strip())  # an outage is exactly when metrics matter
        return token is not None and not token.is_revoked and token.has_scope(TokenScope.METRICS)
    if settings.METRICS_ALLOWED_ADDRESSES:
        try:
            address = ipaddress.ip_address(client_address(request))
        except ValueError:
            return False
        return any(address in network for network in settings.METRICS_ALLOWED_ADDRESSES)
    return False


def metrics_view(request: HttpRequest) -> HttpResponse:
    if not scrape_allowed(request):
        response = HttpResponse("metrics need a bearer token with the 'metrics' scope\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="lessonboard"'
        response["Content-Type"] = "text/plain; charset=utf-8"
        return response
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
