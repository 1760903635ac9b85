"""Prometheus: the project's own series and the ``/metrics`` view.

Multiprocess mode: gunicorn workers and Celery worker processes each write their samples to files in
``PROMETHEUS_MULTIPROC_DIR`` (cleaned by ``serve`` at start); ``/metrics`` aggregates all of them, plus
``python_info`` of the serving process.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
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
LLM_RATE_LIMITS = Counter(
    "lessonboard_llm_rate_limits_total", "Rate-limit answers from the LLM (429, or 503 with Retry-After)."
)

# Collectors whose values are computed at scrape time (e.g. gauges read from the WAL and the database,
# which a per-process gauge cannot get right across processes). Apps append from AppConfig.ready().
EXTRA_COLLECTORS: list[Collector] = []


class LLMBreakerCollector(Collector):
    """``lessonboard_llm_breaker_open`` (1 while the LLM is unreachable) and how long it has been, read
    from the shared breaker row at scrape time so every process reports the same thing."""

    def collect(self) -> Iterator[Metric]:
        from django.utils import timezone

        from lessonboard import breaker

        outage = breaker.outage()
        yield GaugeMetricFamily(
            "lessonboard_llm_breaker_open",
            "1 while the LLM breaker is open (work that needs it waits).",
            value=int(outage is not None),
        )
        seconds = (timezone.now() - outage.since).total_seconds() if outage is not None else 0.0
        yield GaugeMetricFamily(
            "lessonboard_llm_unreachable_seconds",
            "How long the LLM has been unreachable (0 when reachable).",
            value=seconds,
        )
        from lessonboard.llm import ratelimit

        now = timezone.now()
        pause = ratelimit.current(now=now)
        yield GaugeMetricFamily(
            "lessonboard_llm_rate_limited",
            "1 while the LLM's rate limit pauses every call (work that needs it waits).",
            value=int(pause is not None),
        )
        yield GaugeMetricFamily(
            "lessonboard_llm_rate_limited_seconds",
            "How long the LLM has been rate-limiting without an answer in between (0 when not).",
            value=(now - pause.since).total_seconds() if pause is not None else 0.0,
        )


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(reg)
    else:  # pragma: no cover - single-process use (a shell); serve and tests always set the dir
        from prometheus_client import REGISTRY

        return REGISTRY
    PlatformCollector(registry=reg)
    reg.register(LLMBreakerCollector())
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
    if settings.METRICS_ALLOWED_NETWORKS:
        try:
            address = ipaddress.ip_address(client_address(request))
        except ValueError:
            return False
        return any(address in network for network in settings.METRICS_ALLOWED_NETWORKS)
    return False


def metrics_view(request: HttpRequest) -> HttpResponse:
    if not scrape_allowed(request):
        response = HttpResponse("metrics need a bearer token with the 'metrics' scope\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="lessonboard"'
        response["Content-Type"] = "text/plain; charset=utf-8"
        return response
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
