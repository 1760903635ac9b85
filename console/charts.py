"""The Overview's charts, computed server-side as SVG geometry (no script, no inline style: bars and
lines carry CSS classes), like the refine page's similarity chart.

Hourly series over a window (24 h or 7 d): triggers accepted, lessons made, jobs that died, retries
(attempts after the first), proposals decided by people and by the gates; the queue depth sampled
across the window; the top error groups; LLM tokens and cost per workspace and agent. Each series is one
GROUP BY query on an indexed timestamp.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.cache import cache
from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from lessonq.models import Job, JobAttempt, JobState
from lessonq.triage import queries as triage
from lessons.models import Lesson
from lessons.review.models import Decision, Proposal

WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7)}
WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP = 360, 120, 30, 18, 8
DEPTH_SAMPLES = 24  # points of the queue-depth line, whatever the window


class PlotArea:
    """Where a chart's plot sits inside its ``width`` × ``height`` box (the axes' room left and below)."""

    width: int
    height: int

    @property
    def plot_bottom(self) -> int:
        return self.height - PAD_BOTTOM

    @property
    def plot_left(self) -> int:
        return PAD_LEFT

    @property
    def plot_right(self) -> int:
        return self.width


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    value: int
    label: str  # the hour it counts, for the tooltip


@dataclass(frozen=True)
class BarChart(PlotArea):
    title: str
    css: str
    bars: list[Bar]
    total: int
    peak: int
    y_ticks: list[tuple[float, int]]
    x_ticks: list[tuple[float, str]]
    width: int = WIDTH
    height: int = HEIGHT
    line: str = ""  # a polyline instead of bars (queue depth)


def _buckets(window: timedelta, now: datetime) -> list[datetime]:
    end = now.replace(minute=0, second=0, microsecond=0)
    hours = int(window.total_seconds() // 3600)
    return [end - timedelta(hours=hours - 1 - i) for i in range(hours)]


def hourly(qs: QuerySet[Any], field: str, buckets: list[datetime]) -> list[int]:
    """Rows of ``qs`` per hour of ``field``, one count per bucket (zero where none)."""
    rows = (
        qs.filter(**{f"{field}__gte": buckets[0]})
        .annotate(hour=TruncHour(field))
        .order_by()
        .values("hour")
        .annotate(n=Count("pk"))
    )
    counts = {row["hour"]: row["n"] for row in rows}
    return [counts.get(b, 0) for b in buckets]


def _scale(peak: int) -> int:
    """A round top for the y axis."""
    for top in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000):
        if peak <= top:
            return top
    return peak


def _x_ticks(buckets: list[datetime], left: float, step: float) -> list[tuple[float, str]]:
    every = max(1, len(buckets) // 6)
    fmt = "%H:%M" if len(buckets) <= 24 else "%a %H:%M"
    local = [timezone.localtime(b) for b in buckets]
    return [(left + i * step, local[i].strftime(fmt)) for i in range(0, len(buckets), every)]


def bar_chart(title: str, css: str, values: list[int], buckets: list[datetime]) -> BarChart:
    plot_w, plot_h = WIDTH - PAD_LEFT, HEIGHT - PAD_BOTTOM - PAD_TOP
    step = plot_w / max(1, len(values))
    top = _scale(max(values, default=0))
    bars = []
    for i, (value, hour) in enumerate(zip(values, buckets, strict=True)):
        h = plot_h * value / top if top else 0.0
        label = timezone.localtime(hour).strftime("%Y-%m-%d %H:00")
        bars.append(Bar(PAD_LEFT + i * step + step * 0.1, PAD_TOP + plot_h - h, step * 0.8, h, value, label))
    fractions = (0.0, 0.5, 1.0) if top % 2 == 0 else (0.0, 1.0)  # no repeated or rounded-off middle tick
    y_ticks = [(PAD_TOP + plot_h * (1 - f), int(top * f)) for f in fractions]
    return BarChart(title, css, bars, sum(values), max(values, default=0), y_ticks, _x_ticks(buckets, PAD_LEFT, step))


def line_chart(title: str, css: str, values: list[int], samples: list[datetime]) -> BarChart:
    chart = bar_chart(title, css, values, samples)
    points = " ".join(f"{b.x + b.width / 2:.1f},{b.y:.1f}" for b in chart.bars)
    return BarChart(
        title, css, chart.bars, values[-1] if values else 0, chart.peak, chart.y_ticks, chart.x_ticks, line=points
    )


def depth_peaks(samples: list[datetime]) -> list[int]:
    """Each point's peak: the highest per-minute sample (``QueueDepthSample``) in the bucket that ends at
    it, and at least the depth rebuilt at that instant (a fresh install has no samples yet)."""
    from lessonboard.models import QueueDepthSample

    rebuilt = queue_depth(samples)
    if len(samples) < 2:
        return rebuilt
    span = (samples[1] - samples[0]).total_seconds()
    peaks = list(rebuilt)
    rows = QueueDepthSample.objects.filter(at__gt=samples[0] - (samples[1] - samples[0]), at__lte=samples[-1])
    for at, depth in rows.values_list("at", "depth"):
        i = min(max(math.ceil((at - samples[0]).total_seconds() / span), 0), len(samples) - 1)
        peaks[i] = max(peaks[i], depth)
    return peaks


def queue_depth(samples: list[datetime]) -> list[int]:
    """Jobs waiting or running at each sample time, rebuilt from enqueue and finish times in one query
    (the queue keeps no depth history of its own)."""

    waiting = {
        f"d{i}": Count("pk", filter=Q(enqueued_at__lte=t) & (Q(finished_at__isnull=True) | Q(finished_at__gt=t)))
        for i, t in enumerate(samples)
    }
    row = Job.objects.filter(Q(finished_at__isnull=True) | Q(finished_at__gte=samples[0])).aggregate(**waiting)
    return [row[f"d{i}"] or 0 for i in range(len(samples))]


@dataclass(frozen=True)
class Segment:
    x: float
    y: float
    width: float
    height: float
    series: int  # the legend row it belongs to (CSS class stack-<n>)
    label: str  # hour, workspace / agent and tokens, for the tooltip


@dataclass(frozen=True)
class UsageSeries:
    index: int
    workspace: str
    agent: str
    tokens: int
    cost: Decimal
    calls: int

    @property
    def label(self) -> str:
        if self.index == OTHER:
            return "all other workspaces and agents"
        return f"{self.workspace or '(no workspace)'} / {self.agent or '(no agent)'}"


@dataclass(frozen=True)
class UsageChart(PlotArea):
    """LLM tokens per hour, stacked by workspace and agent (the top USAGE_SERIES, then the rest), with the
    legend's tokens and cost over the window (lessonboard.llm.usage records every call)."""

    segments: list[Segment]
    series: list[UsageSeries]
    total_tokens: int
    total_cost: Decimal
    peak: int
    y_ticks: list[tuple[float, int]]
    x_ticks: list[tuple[float, str]]
    width: int = WIDTH
    height: int = HEIGHT


USAGE_SERIES = 4  # workspace/agent pairs with a colour of their own; the rest stack as one
OTHER = USAGE_SERIES


def _round_top(peak: int) -> int:
    """A round top for a y axis of any size (1, 2 or 5 times a power of ten)."""
    magnitude = 1
    while True:
        for factor in (1, 2, 5):
            if peak <= factor * magnitude:
                return factor * magnitude
        magnitude *= 10


def usage_chart(buckets: list[datetime]) -> UsageChart:
    """Tokens per hour per workspace and agent, one GROUP BY on LLMCall's indexed ``created_at``."""
    from lessonboard.models import LLMCall

    rows = list(
        LLMCall.objects.filter(created_at__gte=buckets[0])
        .annotate(hour=TruncHour("created_at"))
        .order_by()
        .values("hour", "workspace", "agent")
        .annotate(tokens=Sum(F("prompt_tokens") + F("completion_tokens")), cost=Sum("cost"), calls=Count("id"))
    )
    totals: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        entry = totals.setdefault((row["workspace"], row["agent"]), [0, Decimal(0), 0])
        entry[0] += row["tokens"] or 0
        entry[1] += row["cost"] or Decimal(0)
        entry[2] += row["calls"]
    ranked = sorted(totals, key=lambda pair: (-totals[pair][0], pair))
    index = {pair: min(i, OTHER) for i, pair in enumerate(ranked)}
    series = [UsageSeries(i, *pair, *totals[pair]) for i, pair in enumerate(ranked[:USAGE_SERIES])]
    rest = ranked[USAGE_SERIES:]
    if rest:
        series.append(
            UsageSeries(
                OTHER,
                "",
                "",
                sum(totals[p][0] for p in rest),
                sum((totals[p][1] for p in rest), Decimal(0)),
                sum(totals[p][2] for p in rest),
            )
        )
    position = {hour: i for i, hour in enumerate(buckets)}
    stacks = [[0] * (USAGE_SERIES + 1) for _ in buckets]
    for row in rows:
        i = position.get(row["hour"])
        if i is not None:
            stacks[i][index[(row["workspace"], row["agent"])]] += row["tokens"] or 0
    plot_w, plot_h = WIDTH - PAD_LEFT, HEIGHT - PAD_BOTTOM - PAD_TOP
    step = plot_w / max(1, len(buckets))
    peak = max((sum(stack) for stack in stacks), default=0)
    top = _round_top(peak)
    labels = {s.index: s.label for s in series}
    segments = []
    for i, (stack, hour) in enumerate(zip(stacks, buckets, strict=True)):
        base = float(PAD_TOP + plot_h)
        when = timezone.localtime(hour).strftime("%Y-%m-%d %H:00")
        for n, tokens in enumerate(stack):
            if not tokens:
                continue
            h = plot_h * tokens / top
            base -= h
            label = f"{when}: {labels.get(n, '')}, {tokens} tokens"
            segments.append(Segment(PAD_LEFT + i * step + step * 0.1, base, step * 0.8, h, n, label))
    y_ticks = [(PAD_TOP + plot_h * (1 - f), int(top * f)) for f in (0.0, 1.0)]
    return UsageChart(
        segments,
        series,
        sum(s.tokens for s in series),
        sum((s.cost for s in series), Decimal(0)),
        peak,
        y_ticks,
        _x_ticks(buckets, PAD_LEFT, step),
    )


@dataclass(frozen=True)
class Charts:
    window: str
    bars: list[BarChart]
    depth: BarChart
    top_groups: list[dict[str, Any]]
    usage: UsageChart | None = None


CHARTS_TTL = 20  # seconds: every open Overview polls the charts; they are shared between viewers


def collect(window: str = "24h", *, now: datetime | None = None) -> Charts:
    """The charts of ``window``, cached for everyone for ``CHARTS_TTL`` (``now`` given: not cached)."""
    window = window if window in WINDOWS else "24h"
    if now is not None:
        return _collect(window, now)
    key = f"lessonboard:charts:{window}"
    charts = cache.get(key)
    if charts is None:
        charts = _collect(window, timezone.now())
        cache.set(key, charts, CHARTS_TTL)
    return charts  # type: ignore[no-any-return]


def _collect(window: str, now: datetime) -> Charts:
    buckets = _buckets(WINDOWS[window], now)
    people = [Decision.APPROVED, Decision.EDITED, Decision.REJECTED]
    series: Iterable[tuple[str, str, QuerySet[Any], str]] = [
        ("Triggers accepted", "accepted", Job.objects.all(), "enqueued_at"),
        ("Lessons made", "lessons", Lesson.objects.all(), "created_at"),
        ("Jobs dead", "dead", Job.objects.filter(state__in=[JobState.DEAD, JobState.PURGED]), "finished_at"),
        ("Retries (attempt 2 and later)", "retried", JobAttempt.objects.filter(number__gt=1), "started_at"),
        ("Proposals decided by people", "people", Proposal.objects.filter(decision__in=people), "decided_at"),
        ("Proposals decided by the gates", "gates", Proposal.objects.filter(decision=Decision.AUTO), "decided_at"),
    ]
    bars = [bar_chart(title, css, hourly(qs, field, buckets), buckets) for title, css, qs, field in series]
    span = WINDOWS[window] / DEPTH_SAMPLES
    samples = [now - span * (DEPTH_SAMPLES - 1 - i) for i in range(DEPTH_SAMPLES)]
    depth = line_chart("Queue depth (waiting or running), peak per point", "depth", depth_peaks(samples), samples)
    groups = triage.error_groups(limit=5)
    widest = max((g.total for g in groups), default=0)
    top = [{"group": g, "percent": round(100 * g.total / widest) if widest else 0} for g in groups]
    return Charts(window, bars, depth, top, usage_chart(buckets))
