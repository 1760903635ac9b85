"""The Overview's charts and dependency states (server-side SVG, polled)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from lessonboard import charts
from lessonboard.models import WorkerHeartbeat
from lessonq.models import JobState
from lessons.review import decisions
from lessons.store import persist_manual

pytestmark = pytest.mark.django_db


def total(page: str, css: str) -> str:
    match = re.search(rf'data-chart="{css}">\s*<h3>[^<]*<span class="muted small">([^<]*)</span>', page)
    assert match, css
    return match.group(1)


def test_it_charts_the_last_24_hours_per_hour(client_as, carol, bob, jobs, stage):
    jobs()  # accepted and died now
    jobs(state=JobState.SUCCEEDED, attempts=2)  # accepted, one retry
    jobs(enqueued_at=timezone.now() - timedelta(days=3))  # outside the 24 h window
    persist_manual("always pin versions", actor="test")
    rows = stage({"target": "memory", "op": "add", "content": "uses pnpm", "rationale": "r", "score": 0.9})
    decisions.approve(rows[0].pk, bob)
    page = client_as(carol).get("/").content.decode()
    assert total(page, "accepted") == "2 in all, peak 2/h"
    assert total(page, "lessons") == "1 in all, peak 1/h"
    assert total(page, "dead").startswith("2 in all")  # the old job died now too (finished_at is now)
    assert total(page, "retried") == "1 in all, peak 1/h"
    assert total(page, "people") == "1 in all, peak 1/h"
    assert '<rect class="bar"' in page and "<svg" in page and "style=" not in page.split('id="charts"')[1]


def test_it_widens_to_seven_days(client_as, carol, jobs):
    jobs(enqueued_at=timezone.now() - timedelta(days=3))
    page = client_as(carol).get("/?window=7d").content.decode()
    assert total(page, "accepted") == "1 in all, peak 1/h"
    assert 'href="?window=7d" aria-current="page"' in page


def test_it_rebuilds_the_queue_depth_from_enqueue_and_finish_times():
    from lessonq.models import Job

    now = timezone.now()
    samples = [now - timedelta(hours=2), now - timedelta(minutes=30), now]
    Job.objects.create(
        id="a" * 16,
        node="n",
        state=JobState.PENDING,
        trigger="error",
        enqueued_at=now - timedelta(hours=1),
        next_attempt_at=now,
    )
    Job.objects.create(
        id="b" * 16,
        node="n",
        state=JobState.SUCCEEDED,
        trigger="error",
        enqueued_at=now - timedelta(hours=3),
        next_attempt_at=now,
        finished_at=now - timedelta(minutes=10),
    )
    assert charts.queue_depth(samples) == [1, 2, 1]


def test_it_shows_each_dependency_with_its_last_error(client_as, carol, settings):
    settings.LLM_BASE_URL = ""
    page = client_as(carol).get("/").content.decode()
    deps = page.split('id="dependencies"')[1].split("</table>")[0]
    assert re.search(r'data-dependency="database" class="ok"', deps)
    assert re.search(r'data-dependency="LLM" class="bad"', deps) and "no LLM configured" in deps
    assert re.search(r'data-dependency="workers" class="bad"', deps)
    assert re.search(r'data-dependency="beat" class="bad"', deps)
    WorkerHeartbeat.objects.create(hostname="n:host", node="n", last_seen=timezone.now(), beats=3)
    cache.delete("lessonboard:dependencies")
    again = client_as(carol).get("/overview/charts").content.decode()
    assert re.search(r'data-dependency="workers" class="ok"', again)
    assert re.search(r'data-dependency="beat" class="ok"', again)
    assert "last error just now: no worker answered" in again  # the healed failure still shows


def test_it_polls_the_charts_while_visible(client_as, carol):
    page = client_as(carol).get("/").content.decode()
    assert re.search(
        r'<section id="charts" data-poll hx-get="/overview/charts\?window=24h" hx-trigger="every 30s', page
    )


def test_it_reaches_the_llm_or_says_why_not(fake_openai, client_as, carol, settings):
    page = client_as(carol).get("/overview/charts").content.decode()
    assert re.search(r'data-dependency="LLM" class="ok"', page) and "reachable" in page
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    cache.delete("lessonboard:dependencies")
    down = client_as(carol).get("/overview/charts").content.decode()
    assert re.search(r'data-dependency="LLM" class="bad"', down) and "unreachable (APIConnectionError" in down
