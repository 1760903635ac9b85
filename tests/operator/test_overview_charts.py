"""The Overview's charts and dependency states (server-side SVG, polled)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, cast

import pytest
from django.core.cache import cache
from django.utils import timezone

from console import charts
from lessonboard.models import WorkerHeartbeat, Workspace
from lessonq import leader
from lessonq.models import Job, JobState
from lessons.review import decisions
from lessons.review.learning import Verdict
from lessons.review.models import Decision, Proposal
from lessons.review.staging import run_review
from lessons.store import persist_manual
from tests.factories import WorkspaceFactory

pytestmark = pytest.mark.django_db


def total(page: str, css: str) -> str:
    match = re.search(rf'data-chart="{css}">\s*<h3>[^<]*<span class="muted small">([^<]*)</span>', page)
    assert match, css
    return match.group(1)


def approve_all(proposal: Any) -> Verdict:
    return Verdict("approve", "approved by the score gate (test)", gate="auto", auto_approve=True)


def test_it_charts_the_last_24_hours_per_hour(client_as, carol, bob, jobs, stage):
    jobs()  # accepted and died now
    jobs(state=JobState.SUCCEEDED, attempts=2)  # accepted, one retry
    jobs(enqueued_at=timezone.now() - timedelta(days=3))  # outside the 24 h window
    persist_manual("always pin versions", actor="test")
    rows = stage({"target": "memory", "op": "add", "content": "uses pnpm", "rationale": "r", "score": 0.9})
    decisions.approve(rows[0].pk, bob)
    gated = [
        {"target": "memory", "op": "add", "content": text, "rationale": "r", "score": 0.95}
        for text in ("deploys with helm", "runs tests with pytest")
    ]
    run_review(
        cast(Workspace, WorkspaceFactory(slug="acme")),
        "did more work",
        agent="coder",
        proposer=lambda s: gated,
        gate=approve_all,
    )
    assert Proposal.objects.filter(decision=Decision.AUTO).count() == 2  # the gate decided both, nobody else
    page = client_as(carol).get("/").content.decode()
    assert total(page, "accepted") == "2 in all, peak 2/h"
    assert total(page, "lessons") == "1 in all, peak 1/h"
    assert total(page, "dead").startswith("2 in all")  # the old job died now too (finished_at is now)
    assert total(page, "retried") == "1 in all, peak 1/h"
    assert total(page, "people") == "1 in all, peak 1/h"
    assert total(page, "gates") == "2 in all, peak 2/h"
    gates = page.split('data-chart="gates"')[1].split("</section>")[0]
    assert re.findall(r"<title>[^<]*: (\d+)</title>", gates) == ["2"]  # one bar: this hour's
    assert '<rect class="bar"' in page and "<svg" in page and "style=" not in page.split('id="charts"')[1]


def test_it_widens_to_seven_days(client_as, carol, jobs):
    jobs(enqueued_at=timezone.now() - timedelta(days=3))
    page = client_as(carol).get("/?window=7d").content.decode()
    assert total(page, "accepted") == "1 in all, peak 1/h"
    assert 'href="?window=7d" aria-current="page"' in page


def test_it_rebuilds_the_queue_depth_from_enqueue_and_finish_times():
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


def test_it_lists_the_top_error_groups_widest_first(client_as, carol, jobs):
    quota = [jobs(error="permanent: quota exceeded") for _ in range(3)]
    prose = jobs(error="permanent: the model answered with prose")
    jobs(state=JobState.SUCCEEDED)  # not dead: in no group
    fingerprints = {job.pk: Job.objects.get(pk=job.pk).fingerprint for job in (quota[0], prose)}
    page = client_as(carol).get("/").content.decode()
    top = page.split('<ul class="plain top-groups">')[1].split("</ul>")[0]
    rows = re.findall(
        r'<li><a href="/queue/\?tab=dead&amp;group=([0-9a-f]{16})">([^<]*)</a>.*?class="meter-bar"[^>]*width="(\d+)".*?'
        r'<span class="muted small">(\d+) dead · last ',
        top,
        re.S,
    )
    assert [(fp, n, width) for fp, _, width, n in rows] == [
        (fingerprints[quota[0].pk], "3", "100"),
        (fingerprints[prose.pk], "1", "33"),  # a third of the widest group
    ]
    assert "quota exceeded" in rows[0][1] and "answered with prose" in rows[1][1]


def test_it_says_when_there_are_no_dead_jobs(client_as, carol, jobs):
    jobs(state=JobState.SUCCEEDED)
    page = client_as(carol).get("/").content.decode()
    assert "top-groups" not in page and "No dead jobs." in page


def test_it_shows_the_broker_up_and_then_down_with_its_error(client_as, carol, settings, tmp_path):
    """On the embedded broker a file where its folder belongs takes it down; on Redis or RabbitMQ (CI's
    second pass) a URL naming a closed port does."""
    embedded = settings.CELERY_BROKER_URL.startswith("atomicfs://")
    page = client_as(carol).get("/overview/charts").content.decode()
    assert re.search(
        r'data-dependency="broker" class="ok">\s*<th>broker</th><td><span class="badge ok">up</span></td>\s*<td>'
        + ("writable" if embedded else "reachable"),
        page,
    )
    if embedded:
        blocked = tmp_path / "not-a-dir"
        blocked.write_text("a file where the embedded broker wants its folder")
        settings.CELERY_BROKER_TRANSPORT_OPTIONS = {
            **settings.CELERY_BROKER_TRANSPORT_OPTIONS,
            "data_folder_in": str(blocked / "queue"),
        }
        expected = f"embedded broker {blocked / 'queue'} not writable"
    else:
        scheme = settings.CELERY_BROKER_URL.split("://", 1)[0]
        settings.CELERY_BROKER_URL = f"{scheme}://127.0.0.1:1/" + ("0" if scheme.startswith("redis") else "")
        expected = "unreachable:"
    cache.delete("lessonboard:dependencies")
    down = client_as(carol).get("/overview/charts").content.decode()
    row = down.split('data-dependency="broker"')[1].split("</tr>")[0]
    assert row.startswith(' class="bad"') and '<span class="badge bad">down</span>' in row
    assert expected in row


def test_it_shows_each_dependency_with_its_last_error(client_as, carol, settings):
    settings.LLM_BASE_URL = ""
    page = client_as(carol).get("/").content.decode()
    deps = page.split('id="dependencies"')[1].split("</table>")[0]
    assert re.search(r'data-dependency="database" class="ok"', deps)
    assert re.search(r'data-dependency="LLM" class="bad"', deps) and "no LLM configured" in deps
    assert re.search(r'data-dependency="workers" class="bad"', deps)
    assert re.search(r'data-dependency="beat" class="bad"', deps)
    WorkerHeartbeat.objects.create(hostname="n:host", node="n", last_seen=timezone.now(), beats=3)
    leader.hold("n:host:1")  # beat is up when some beat holds the scheduler lease (lessonq.leader)
    cache.delete("lessonboard:dependencies")
    again = client_as(carol).get("/overview/charts").content.decode()
    assert re.search(r'data-dependency="workers" class="ok"', again)
    assert re.search(r'data-dependency="beat" class="ok"', again)
    # The healed failure still shows, with when it happened.
    assert re.search(r'last error <time datetime="[^"]+" title="[^"]+ UTC">just now</time>: no worker answered', again)


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
