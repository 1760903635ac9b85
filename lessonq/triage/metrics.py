"""Triage metrics: distance to the DLQ retention cap, DLQ depth per error fingerprint (both computed
at scrape time), and operator actions. Who acted is in the audit log, never in a label: /metrics must not
name people (docs/security.md#metrics)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

OPERATOR_ACTIONS = Counter(
    "lessonboard_dlq_operator_actions_total",
    "DLQ retries and purges asked for from the triage pages (bulk actions count their items).",
    ["action"],
)

TOP_GROUPS = 50  # label cardinality bound


class TriageCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        from django.conf import settings
        from django.db.models import Count

        from lessonq.models import Job

        try:
            dead = Job.objects.dead().for_this_node().count()
            groups = list(
                Job.objects.dead()
                .order_by()
                .values_list("fingerprint")
                .annotate(n=Count("id"))
                .order_by("-n")[:TOP_GROUPS]
            )
        except Exception:  # the database is down: no triage gauges rather than an error page
            return
        cap = settings.LESSONQ_DLQ_MAX
        yield GaugeMetricFamily("lessonboard_dlq_retention_cap", "LESSONQ_DLQ_MAX: dead jobs kept per node.", value=cap)
        yield GaugeMetricFamily(
            "lessonboard_dlq_cap_remaining",
            "Dead jobs this node can still hold before the retention archives the oldest (negative: over).",
            value=cap - dead,
        )
        by_group = GaugeMetricFamily(
            "lessonboard_dlq_depth_by_fingerprint",
            "Dead jobs per error fingerprint (largest groups).",
            labels=["fingerprint"],
        )
        for fingerprint, n in groups:
            by_group.add_metric([fingerprint], n)
        yield by_group
