"""Derived views cost O(1) to read (docs/api.md#limits): knowledge-gap groups and the inbox's nav badge come
from maintained rows (``DerivedState``), written by beat's ``refresh_derived`` and when an input changes;
a page request reads them and never groups gaps or counts the inbox."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console import inbox
from console.tasks import refresh_derived
from lessonboard.models import AuditEvent, DerivedState
from lessons.review.models import Proposal
from lessons.usage import gaps

pytestmark = pytest.mark.django_db


def add(content: str) -> dict[str, Any]:
    return {"target": "memory", "op": "add", "content": content, "rationale": "because", "score": 0.9}


def _gap(api: Any, task: str) -> int:
    return int(api.post("/api/v1/lessons/retrieve", {"task": task, "workspace": "empty"}).json()["retrieval_id"])


def test_pages_read_the_maintained_gap_groups_and_never_group(api, client_as, carol, monkeypatch):
    for task in ("rotate the TLS certificates", "rotate the TLS certificates", "translate the emails"):
        _gap(api, task)
    assert refresh_derived() == {"gap_groups": 2, "inbox_items": 2}  # beat's task
    assert DerivedState.objects.filter(pk=gaps.SNAPSHOT).exists()

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a page request grouped the gaps")

    monkeypatch.setattr(gaps, "_grouped", never)
    client = client_as(carol)
    html = client.get("/lessons/gaps/").content.decode()
    assert 'data-gap-count="2"' in html and 'data-gap-count="1"' in html
    inbox_page = client.get("/inbox/").content.decode()
    assert "asked 2×" in inbox_page and 'id="nav-inbox-count">2<' in inbox_page
    # A new gap is not on the pages until the maintained row is refreshed (beat, or the embed worker).
    _gap(api, "a third, different task")
    assert 'data-gap-count="1"' in client.get("/lessons/gaps/").content.decode()
    assert len(gaps.open_gap_groups()) == 2


def test_the_nav_badge_reads_the_maintained_row_less_this_persons_dismissals(client_as, bob, carol, stage):
    stage(add("uses pnpm"))
    client = client_as(carol)
    assert inbox.count_for(carol) == 0  # nothing maintained yet: the badge does not compute it
    inbox.refresh()
    assert inbox.count_for(carol) == 1
    with CaptureQueriesContext(connection) as queries:
        page = client.get("/lessons/").content.decode()
    assert 'id="nav-inbox-count">1<' in page
    read = [q["sql"] for q in queries.captured_queries]
    assert any(DerivedState._meta.db_table in sql for sql in read)
    assert not any(Proposal._meta.db_table in sql for sql in read)  # the badge never read the inputs
    stage(add("the build uses bazel"), workspace="other")
    assert inbox.count_for(carol) == 1  # until the next refresh
    inbox.refresh()
    assert inbox.count_for(carol) == 2
    (first, *_) = inbox.items_for(carol)
    AuditEvent.record("inbox.dismiss", user=carol, object_type=f"inbox.{first.kind}", object_ids=[first.key])
    assert inbox.count_for(carol) == 1 and inbox.count_for(bob) == 2  # dismissing is per person


def test_dismissing_gaps_updates_the_maintained_groups_at_once(api, client_as, bob):
    ids = [_gap(api, "rotate the TLS certificates") for _ in range(2)]
    other = _gap(api, "translate the emails")
    gaps.refresh()
    response = client_as(bob).post("/lessons/gaps/dismiss", {"ids": ",".join(map(str, ids))})
    assert response.status_code == 302
    assert [g.ids for g in gaps.open_gap_groups()] == [[other]]  # no refresh needed


def test_the_gaps_page_shows_the_biggest_groups_only(api, client_as, carol, monkeypatch):
    from lessons.usage import views

    monkeypatch.setattr(views, "PAGE_GROUPS", 2)
    for task in ("first task", "first task", "second task", "third task"):
        _gap(api, task)
    gaps.refresh()
    html = client_as(carol).get("/lessons/gaps/").content.decode()
    assert html.count("data-gap-count=") == 2 and 'data-gap-count="2"' in html
    assert 'id="gaps-more">1 smaller group not shown' in html


def test_beats_refresh_regroups_only_when_the_gaps_changed(api, monkeypatch):
    _gap(api, "rotate the TLS certificates")
    assert gaps.refresh() == 1
    calls: list[int] = []
    compute = gaps._grouped

    def counted(**kwargs: Any) -> Any:
        calls.append(1)
        return compute(**kwargs)

    monkeypatch.setattr(gaps, "_grouped", counted)
    assert gaps.refresh() == 1 and calls == []  # unchanged inputs: the row stays, nothing is grouped
    _gap(api, "translate the emails")
    assert gaps.refresh() == 2 and calls == [1]
