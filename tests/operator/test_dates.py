"""Dates on pages, one way everywhere: a ``<time>`` element with the ISO instant in ``datetime``, the exact
UTC time in ``title`` and the relative wording ("just now", "5 minutes ago") as its text — never Django's
default format ("Dec. 1, 2026, 2:03 p.m."), a bare timestamp or a "0 minutes" without "ago"."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.template import Context, Template
from django.utils import timezone

from lessonboard.models import AuditEvent
from lessonq import reconcile
from lessonq.models import Job, JobState
from lessonq.paths import wal
from lessonq.triage.models import BulkAction
from lessons.models import Lesson
from lessons.reflect.models import DocProposal
from lessons.review import decisions
from lessons.review.models import Proposal
from refine.models import RefineRun
from tests.support.queue import record

pytestmark = pytest.mark.django_db

TIME = re.compile(r"<time\b([^>]*)>([^<]*)</time>")
ISO = re.compile(r'datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00"')
EXACT = re.compile(r'title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"')
RELATIVE = re.compile(r"^(just now|in under a minute|in \d.*|\d.* ago)$")
# Django's default DATETIME_FORMAT ("N j, Y, P": "Dec. 1, 2026, 2:03 p.m."), a bare timestamp, timesince alone.
DEFAULT_FORMAT = re.compile(r"\b(Jan|Feb|March|April|May|June|July|Aug|Sept|Oct|Nov|Dec)\.? \d{1,2}, \d{4}")
MERIDIEM = re.compile(r"\d (a\.m\.|p\.m\.)|\bmidnight\b|\bnoon\b")
BARE = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d")


@pytest.fixture
def demo_data(queue_dir: Any, api: Any, bob: Any) -> Iterator[None]:
    """The demo workspace, plus what it does not make: a decided proposal, a bulk action, a knowledge gap,
    a quarantined queue record and an audit trail."""
    call_command("demo", stdout=StringIO())
    decisions.approve(Proposal.objects.pending().first().pk, bob)  # type: ignore[union-attr]
    BulkAction.objects.create(
        kind="retry", scope="selection", cap=10, total=0, state="done", finished_at=timezone.now()
    )
    for _ in range(2):
        api.post("/api/v1/lessons/retrieve", {"task": "rotate the TLS certificates", "workspace": "empty"})
    wal().append(record("00000000000000e1", attempts=10**12))
    reconcile.sweep()
    Job.objects.filter(state=JobState.DEAD).update(finished_at=timezone.now() - timedelta(hours=3))
    AuditEvent.record("inbox.dismiss", user=bob, object_type="inbox.dead", object_ids=["x"])
    yield
    call_command("demo", "--remove", stdout=StringIO())


def pages() -> list[str]:
    dead = Job.objects.filter(state=JobState.DEAD).first()
    lesson = Lesson.objects.filter(versions__number=2).first()
    decided = Proposal.objects.exclude(decided_at=None).first()
    doc = DocProposal.objects.first()
    assert dead and lesson and decided and doc
    return [
        "/",
        "/inbox/",
        "/queue/",
        "/queue/?tab=dead",
        "/queue/?tab=retrying",
        "/queue/?tab=done",
        f"/queue/jobs/{dead.id}/",
        "/queue/groups/",
        f"/queue/bulk/{BulkAction.objects.get().pk}/",
        "/audit/",
        "/lessons/?status=all",
        f"/lessons/{lesson.pk}/",
        "/lessons/gaps/",
        "/workspaces/",
        f"/workspaces/{doc.workspace.slug}/",
        "/reviews/",
        "/reviews/decisions/",
        f"/reviews/{decided.pk}/",
        "/refine/",
        f"/refine/{RefineRun.objects.get().pk}/",
        "/refine/modes/",
    ]


def test_every_page_shows_every_date_the_one_way(client_as: Any, alice: Any, demo_data: None) -> None:
    client = client_as(alice)  # an admin: every page, every control
    seen = 0
    for url in pages():
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        main = html.split("<main", 1)[1].split("</main>", 1)[0]
        times = TIME.findall(main)
        for attrs, text in times:
            assert ISO.search(attrs) and EXACT.search(attrs), (url, attrs)
            assert RELATIVE.match(text.replace("\xa0", " ")), (url, text)
        seen += len(times)
        # Outside the <time> elements' attributes, code and diffs (a file's own generated_at) and the charts
        # (their axes and bars name hours, not moments), no date is written any other way.
        text = TIME.sub(lambda m: m.group(2), main)
        text = re.sub(r"<(code|pre|del|ins|svg)\b.*?</\1>", "", text, flags=re.S)
        text = re.sub(r'<div class="diff">(<div class="[^"]*">[^<]*</div>)*</div>', "", text)
        for pattern in (DEFAULT_FORMAT, MERIDIEM, BARE):
            found = pattern.search(text)
            assert not found, (url, text[max(0, found.start() - 300) : found.end() + 100] if found else "")
        assert "0\xa0minutes" not in text, url
    assert seen >= 40  # the pages above show dates, and were checked


def test_the_filter_renders_a_time_element_in_utc() -> None:
    moment = timezone.now() - timedelta(hours=2, minutes=1)
    html = Template("{% load when %}{{ t|when }} {{ none|when }} {{ iso|when }} {{ junk|when }}").render(
        Context({"t": moment, "none": None, "iso": "2026-11-30T05:00:00Z", "junk": "<soon>"})
    )
    exact = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    assert f'<time datetime="{moment.astimezone(UTC).isoformat(timespec="seconds")}"' in html
    assert f'title="{exact} UTC">2\xa0hours, 1\xa0minute ago</time>' in html
    assert ' — <time datetime="2026-11-30T05:00:00+00:00" title="2026-11-30 05:00:00 UTC">' in html
    assert html.endswith("&lt;soon&gt;")  # not a time: shown as it is, escaped
