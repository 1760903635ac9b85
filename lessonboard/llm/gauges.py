"""The LLM gateway's gauges, read from the shared breaker row at scrape time (so every process reports the
same thing); registered with the project's ``/metrics`` by ``lessonboard.apps``."""

from __future__ import annotations

from collections.abc import Iterator

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from lessonboard.llm import breaker, limiter, ratelimit


class LLMBreakerCollector(Collector):
    """``lessonboard_llm_breaker_open`` (1 while the LLM is unreachable) and how long it has been, read
    from the shared breaker row at scrape time so every process reports the same thing."""

    def collect(self) -> Iterator[Metric]:
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
        allowed = GaugeMetricFamily(
            "lessonboard_llm_concurrency_allowed",
            "LLM calls the node may have in flight now, by model (adaptive: cut on 429s and timeouts, grown "
            "back on answers; at most lessonboard_llm_concurrency_max).",
            labels=["model"],
        )
        ceiling = GaugeMetricFamily(
            "lessonboard_llm_concurrency_max",
            "The configured ceiling of LLM calls in flight per node, by model (LESSONBOARD_LLM_CONCURRENCY).",
            labels=["model"],
        )
        for model in limiter.known_models():
            allowed.add_metric([model], limiter.allowed_exact(model))
            ceiling.add_metric([model], limiter.limit_for(model))
        yield allowed
        yield ceiling
