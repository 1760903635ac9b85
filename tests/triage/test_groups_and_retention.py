"""Error groups (counts over 1 h / 24 h / 7 d, each a filtered list) and the DLQ retention (archive,
never delete; a gauge of the distance to the cap)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone

from lessonboard.models import AuditEvent
from lessonq import retention
from lessonq.models import Job, JobState
from lessonq.paths import base, dlq
from lessonq.triage import queries as triage
from lessonq.triage.models import RetentionRun
from tests.triage.conftest import hx

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    cache.delete_many([triage.COUNTS_KEY, triage.GROUPS_KEY])


def test_it_counts_error_groups_over_time_windows(client_as: Any, alice: Any, jobs: Any) -> None:
    now = timezone.now()
    for minutes in (10, 30, 60 * 5, 60 * 24 * 3, 60 * 24 * 10):
        jobs(error=f"transient: upstream 503 after {minutes} tries", finished_at=now - timedelta(minutes=minutes))
    jobs(error="lessonq: job timed out after 120s", finished_at=now - timedelta(minutes=2))
    groups = triage.error_groups(now=now)
    assert [(g.total, g.windows) for g in groups] == [
        (5, {"1h": 2, "24h": 3, "7d": 4}),
        (1, {"1h": 1, "24h": 1, "7d": 1}),
    ]
    html = client_as(alice).get("/queue/groups/").content.decode()
    fp = groups[0].fingerprint
    assert f"/queue/?tab=dead&amp;group={fp}&amp;died=1h" in html and "upstream <n> after <n> tries" in html.replace(
        "&lt;", "<"
    ).replace("&gt;", ">")
    assert "Retry group…" in html
    listed = hx(client_as(alice), "/queue/", {"tab": "dead", "group": fp, "died": "1h"}).content.decode()
    assert listed.count("data-job=") == 2


def test_the_groups_fragment_polls_and_a_viewer_gets_no_actions(client_as: Any, carol: Any, jobs: Any) -> None:
    jobs()
    html = hx(client_as(carol), "/queue/groups/").content.decode()
    assert "<html" not in html and "data-poll" in html and "Retry group" not in html


def test_retention_archives_over_the_cap_and_age_without_deleting(jobs: Any, settings: Any) -> None:
    settings.LESSONQ_DLQ_MAX = 2
    settings.LESSONQ_DLQ_MAX_AGE = 30 * 86400
    now = timezone.now()
    ancient = jobs(task="ancient", finished_at=now - timedelta(days=40))
    old = jobs(task="old", finished_at=now - timedelta(days=5))
    keep = [jobs(task="recent", finished_at=now - timedelta(hours=h)) for h in (1, 2)]
    other_node = jobs(node="lessonq.elsewhere", finished_at=now - timedelta(days=90))
    run = retention.enforce(now=now)
    assert run is not None and (run.over_age, run.over_cap, run.archived) == (1, 1, 2)
    for job in (ancient, old):
        assert Job.objects.get(pk=job.id).state == JobState.PURGED
        assert not dlq().exists(job.id)
    folder = base() / "archive"
    moved = sorted(p.name for p in folder.glob("*/*.wal"))
    assert moved == sorted(f"{j.id}.wal" for j in (ancient, old))  # moved, not deleted
    lines = [json.loads(line) for line in open(run.export_path, encoding="utf-8")]
    assert {(r["id"], r["reason"]) for r in lines} == {(ancient.id, "age"), (old.id, "cap")}
    assert lines[0]["attempt_rows"] and lines[0]["last_error"]
    assert all(Job.objects.get(pk=j.id).state == JobState.DEAD for j in [*keep, other_node])
    event = AuditEvent.objects.get(action="queue.dlq_archive")
    assert sorted(event.object_ids) == sorted([ancient.id, old.id]) and event.result["export"] == run.export_path
    assert retention.enforce(now=now) is None  # nothing over any more
    assert RetentionRun.objects.count() == 1


def test_an_archived_job_still_shows_its_record(client_as: Any, carol: Any, jobs: Any, settings: Any) -> None:
    settings.LESSONQ_DLQ_MAX = 1
    first, _ = jobs(finished_at=timezone.now() - timedelta(hours=3)), jobs()
    retention.enforce()
    html = client_as(carol).get(f"/queue/jobs/{first.id}/").content.decode()
    assert "<code>archive/</code>" in html


def test_the_gauge_and_page_show_the_distance_to_the_cap(
    client: Any, client_as: Any, carol: Any, jobs: Any, settings: Any
) -> None:
    settings.LESSONQ_DLQ_MAX = 5
    for _ in range(3):
        jobs()
    metrics = client_as(carol).get("/metrics").content.decode()
    assert "lessonboard_dlq_cap_remaining 2.0" in metrics and "lessonboard_dlq_retention_cap 5.0" in metrics
    assert "lessonboard_dlq_depth_by_fingerprint{fingerprint=" in metrics
    html = client_as(carol).get("/queue/groups/").content.decode()
    assert "data-dead>3<" in html and "data-remaining>2<" in html
