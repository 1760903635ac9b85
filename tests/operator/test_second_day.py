"""An operator's second day: the favicon, a first run that guides, pause/resume, running now,
schedules (see docs/operations.md#operator-pages)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_favicon_ico_is_no_404_and_every_page_links_the_icon(client_as: Any, carol: Any) -> None:
    anonymous = Client()
    answer = anonymous.get("/favicon.ico")  # the admin's pages and browsers ask without a login
    assert answer.status_code == 301 and answer["Location"].endswith("favicon.svg")
    page = client_as(carol).get("/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg"' in page
    from django.contrib.staticfiles import finders

    assert finders.find("favicon.svg") is not None


# --- a first run that guides ----------------------------------------------------------------------------
def test_an_empty_install_says_what_to_do_next(client_as: Any, carol: Any, settings: Any) -> None:
    settings.EMBEDDED_DATABASE = True
    page = client_as(carol).get("/").content.decode()
    assert 'id="first-run"' in page
    assert "python3 lb.py manage create_agent_token my-agent --scope full" in page
    assert "http://testserver/api/v1/reflexion/triggers" in page and "docs/agents.md" in page
    assert "python3 lb.py manage demo" in page and "python3 lb.py serve --demo" in page


def test_the_guide_goes_once_a_job_or_lesson_arrives(client_as: Any, carol: Any, jobs: Any) -> None:
    jobs(task="the first real failure")
    page = client_as(carol).get("/").content.decode()
    assert 'id="first-run"' not in page


def test_serves_children_see_the_embedded_database_and_show_the_demo_hint(
    client_as: Any, carol: Any, settings: Any, monkeypatch: Any
) -> None:
    """``serve`` hands its children the embedded server as DATABASE_URL: EMBEDDED_DATABASE is false there,
    which used to switch the hint off. What counts is where the database is."""
    from lessonboard import embedded

    settings.EMBEDDED_DATABASE = False
    monkeypatch.setitem(settings.DATABASES["default"], "HOST", str(embedded.socket_dir(settings.EMBEDDED_PGDATA)))
    assert embedded.in_use()
    page = client_as(carol).get("/").content.decode()
    assert 'id="demo-banner"' in page and "python3 lb.py serve --demo" in page
    assert "python3 lb.py manage demo" in page


def test_an_empty_production_database_gets_the_guide_without_the_demo(
    client_as: Any, carol: Any, settings: Any, monkeypatch: Any
) -> None:
    from lessonboard import embedded

    settings.EMBEDDED_DATABASE = False
    monkeypatch.setitem(settings.DATABASES["default"], "HOST", "db.internal")  # restored after the test
    assert not embedded.in_use()
    page = client_as(carol).get("/").content.decode()
    assert 'id="first-run"' in page and "create_agent_token" in page
    assert "manage demo" not in page and "serve --demo" not in page


# --- pause and resume -----------------------------------------------------------------------------------
@pytest.fixture
def no_cached_pauses() -> Any:
    from lessonboard import pauses

    pauses.forget()
    yield
    pauses.forget()


def test_pausing_all_llm_work_holds_back_every_queue_and_survives_a_fresh_process_cache(
    client_as: Any, alice: Any, carol: Any, no_cached_pauses: Any
) -> None:
    from lessonboard import pauses
    from lessonboard.models import AuditEvent

    operator = client_as(alice)
    assert operator.post("/queues/llm/pause").status_code == 302
    assert operator.post("/queues/llm/pause").status_code == 302  # twice: one pause, one audit event
    assert AuditEvent.objects.filter(action="queue.pause").count() == 1
    pauses.forget()  # what a restarted process knows: the row
    assert pauses.unavailable_reason("lessonq").startswith("paused: all LLM work, by alice")
    assert pauses.unavailable_reason("refine").startswith("paused: all LLM work")
    assert client_as(carol).post("/queues/llm/resume").status_code == 403  # a viewer may not
    assert operator.post("/queues/llm/resume").status_code == 302
    assert pauses.reason("lessonq") == "" and pauses.reason("refine") == ""


def test_an_unknown_queue_is_a_404_naming_the_field(client_as: Any, alice: Any) -> None:
    answer = client_as(alice).post("/queues/nope/pause")
    assert answer.status_code == 404 and answer.json()["field"] == "queue"


# --- numbers that mean what they say ------------------------------------------------------------------
def test_a_lessons_counts_say_access_count_and_served_by_retrieval(client_as: Any, carol: Any) -> None:
    from lessons.store import persist_lesson

    lesson = persist_lesson(
        situation="editing a big file", mistake="rewrote it", correction="edit in place", tags=["edit"], trigger="error"
    ).lesson
    page = client_as(carol).get(f"/lessons/{lesson.pk}/").content.decode()
    assert "access count 1" in page and "used 1×" not in page  # chatcli's count, not "used"
    from django.template.loader import get_template

    card = get_template("lessons/usage/_usage_card.html").render({"usage": {"served": 3}})
    assert "Served by retrieval" in card


# --- the queue-depth chart from per-minute samples ----------------------------------------------------------
def test_the_depth_chart_keeps_a_bursts_peak_from_the_minute_samples(jobs: Any) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from console import charts
    from lessonboard.models import QueueDepthSample
    from lessonq.models import JobState
    from lessonq.tasks import sample_queue_depth

    jobs(state=JobState.PENDING)
    jobs(state=JobState.RETRY_WAIT)
    jobs()  # dead: not waiting
    assert sample_queue_depth() == 2
    now = timezone.now()
    # A burst three hours ago that peaked at 28 between two hourly points, long drained since.
    for minutes, depth in ((185, 3), (184, 28), (183, 12)):
        QueueDepthSample.objects.create(at=now - timedelta(minutes=minutes), depth=depth)
    QueueDepthSample.objects.create(at=now - timedelta(days=9), depth=99)  # older than any window
    sample_queue_depth()
    assert not QueueDepthSample.objects.filter(depth=99).exists()  # the sampler keeps 8 days
    depth = charts.collect("24h", now=now).depth
    assert depth.peak == 28
    values = [bar.value for bar in depth.bars]
    assert values.count(28) == 1 and values[-1] == 2  # the burst's bucket, and now
