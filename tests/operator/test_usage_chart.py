"""The Overview's LLM usage chart (console/charts.py ``usage_chart``): tokens per hour stacked by workspace
and agent, each pair's tokens and cost in the legend, server-rendered SVG with no inline script or
style, model-supplied names escaped."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

pytestmark = pytest.mark.django_db


# Half past the current hour: calls 6 and 12 minutes before it fall in its hour, one an hour before in the
# previous one, whatever the clock says when the test runs.
NOW = timezone.now().replace(minute=30, second=0, microsecond=0)


def _call(*, hours_ago: float, workspace: str, agent: str, tokens: int, cost: str) -> None:
    from lessonboard.models import LLMCall

    LLMCall.objects.create(
        created_at=NOW - timedelta(hours=hours_ago),
        purpose="lesson",
        model="fake-model",
        prompt_tokens=tokens - tokens // 4,
        completion_tokens=tokens // 4,
        latency_ms=900,
        outcome="ok",
        cost=Decimal(cost),
        workspace=workspace,
        agent=agent,
        prompt_name="lesson",
        prompt_version="lesson-v1",
    )


def test_the_chart_stacks_tokens_per_hour_by_workspace_and_agent() -> None:
    from console import charts

    _call(hours_ago=0.1, workspace="acme", agent="coder", tokens=400, cost="0.004")
    _call(hours_ago=0.2, workspace="acme", agent="coder", tokens=600, cost="0.006")
    _call(hours_ago=0.1, workspace="beta", agent="tester", tokens=300, cost="0.003")
    _call(hours_ago=5, workspace="beta", agent="tester", tokens=100, cost="0.001")
    _call(hours_ago=30, workspace="acme", agent="coder", tokens=9999, cost="9")  # outside 24 h
    for n in range(5):  # five small pairs: the fourth onwards stack as "all other"
        _call(hours_ago=1, workspace="w", agent=f"a{n}", tokens=10 + n, cost="0")
    chart = charts.collect("24h", now=NOW).usage
    assert chart is not None
    top = chart.series[0]
    assert (top.workspace, top.agent, top.tokens, top.cost, top.calls) == ("acme", "coder", 1000, Decimal("0.010"), 2)
    assert (chart.series[1].workspace, chart.series[1].tokens) == ("beta", 400)
    assert [s.index for s in chart.series] == [0, 1, 2, 3, charts.OTHER]
    other = chart.series[-1]
    assert other.label == "all other workspaces and agents" and other.tokens == 12 + 11 + 10  # a2, a1, a0
    assert chart.total_tokens == 1000 + 400 + sum(10 + n for n in range(5))
    # The last hour's stack holds both pairs: 1000 + 300 tokens, the peak of the window.
    assert chart.peak == 1300
    last_hour = [s for s in chart.segments if s.x == max(seg.x for seg in chart.segments)]
    assert sorted(s.series for s in last_hour) == [0, 1]
    assert sum(s.height for s in last_hour) == pytest.approx(
        (chart.height - charts.PAD_BOTTOM - charts.PAD_TOP) * 1300 / 2000
    )


def test_the_overview_shows_the_chart_escaped_and_without_inline_script(client_as: Any, carol: Any) -> None:
    _call(hours_ago=0.1, workspace="acme", agent="<script>alert(1)</script>", tokens=500, cost="0.5")
    page = client_as(carol).get("/").content.decode()
    section = re.search(r'<section class="card chart chart-usage".*?</section>', page, re.S)
    assert section is not None
    html = section.group(0)
    assert 'id="usage-chart"' in html and 'class="bar stack-0"' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "500 tokens" in html and "cost 0.5000" in html
    assert "style=" not in html and "onclick" not in html.lower()


def test_an_empty_window_says_so(client_as: Any, carol: Any) -> None:
    page = client_as(carol).get("/?window=7d").content.decode()
    assert 'id="usage-chart"' in page and "No LLM calls in this window." in page
