"""Statement timeouts per request class (docs/api.md#limits): a query past its class's limit is cancelled by
PostgreSQL and the request answers 503 naming the limit (JSON for the API, a page for people).

The slow query is forced with ``pg_sleep`` in a test-only query path (the view's query replaced by one that
sleeps far longer than the limit); what is asserted is the answer, never a duration."""

from typing import Any

import pytest
from django.db import connection

from lessonboard.timeouts import StatementTimeout, statement_timeout
from lessonq.models import Job
from lessonq.triage import queries as triage
from lessons import retrieval
from lessons.models import Lesson

pytestmark = pytest.mark.django_db

SLEEP = "(SELECT 1 FROM pg_sleep(30)) = 1"  # far past any limit below: only the timeout ends it


def _show() -> str:
    with connection.cursor() as cur:
        cur.execute("SHOW statement_timeout")
        return str(cur.fetchone()[0])


def _sleeping_search(*args: Any, **kwargs: Any) -> Any:
    with connection.cursor() as cur:
        cur.execute(f"SELECT {SLEEP}")
    raise AssertionError("pg_sleep(30) returned: the statement timeout did not fire")


def test_a_retrieve_past_its_timeout_answers_503_naming_the_limit(api, settings, monkeypatch):
    settings.STATEMENT_TIMEOUT_RETRIEVE = 0.05
    before = _show()
    monkeypatch.setattr(retrieval, "search", _sleeping_search)
    response = api.post("/api/v1/lessons/retrieve", {"task": "why does the deploy fail"})
    assert response.status_code == 503
    body = response.json()
    assert body["limit"] == "LESSONBOARD_STATEMENT_TIMEOUT_RETRIEVE" and body["timeout_ms"] == 50
    assert "50 ms statement timeout" in body["error"]
    # The connection is usable and its own timeout untouched: the next (normal) retrieve answers.
    assert _show() == before
    monkeypatch.undo()
    settings.STATEMENT_TIMEOUT_RETRIEVE = 2.0
    assert api.post("/api/v1/lessons/retrieve", {"task": "why does the deploy fail"}).status_code == 200


def test_the_lessons_search_page_past_its_timeout_answers_a_friendly_503(client_as, carol, settings, monkeypatch):
    settings.STATEMENT_TIMEOUT_SEARCH = 0.05
    monkeypatch.setattr(retrieval, "search", _sleeping_search)
    response = client_as(carol).get("/lessons/", {"q": "rare words " * 50})
    assert response.status_code == 503
    text = response.content.decode()
    assert 'id="too-costly"' in text and "LESSONBOARD_STATEMENT_TIMEOUT_SEARCH" in text and "50 ms" in text
    # Live search (htmx) gets the message in the results (htmx swaps no 5xx) and the limit in a header.
    live = client_as(carol).get("/lessons/", {"q": "rare words"}, headers={"HX-Request": "true"})
    assert live.status_code == 200 and live["X-Lessonboard-Limit"] == "LESSONBOARD_STATEMENT_TIMEOUT_SEARCH"
    assert 'id="too-costly"' in live.content.decode() and "<html" not in live.content.decode()


def test_the_lessons_list_page_has_its_own_limit(client_as, carol, settings, monkeypatch):
    Lesson.objects.create(situation="s", correction="c", content="LESSON: s")
    settings.STATEMENT_TIMEOUT_LIST = 0.05
    monkeypatch.setattr(retrieval.Filters, "apply", lambda self, qs: qs.extra(where=[SLEEP]))
    response = client_as(carol).get("/lessons/")
    assert response.status_code == 503
    assert "LESSONBOARD_STATEMENT_TIMEOUT_LIST" in response.content.decode()


def test_the_queue_page_uses_the_search_limit_with_q_and_the_list_limit_without(
    client_as, carol, settings, monkeypatch
):
    settings.STATEMENT_TIMEOUT_SEARCH = 0.05
    settings.STATEMENT_TIMEOUT_LIST = 0.06
    monkeypatch.setattr(triage.JobFilter, "apply", lambda self, **kw: Job.objects.all().extra(where=[SLEEP]))
    searched = client_as(carol).get("/queue/", {"tab": "done", "q": "zzz"})
    assert searched.status_code == 503 and "LESSONBOARD_STATEMENT_TIMEOUT_SEARCH" in searched.content.decode()
    listed = client_as(carol).get("/queue/", {"tab": "done"})
    assert listed.status_code == 503 and "LESSONBOARD_STATEMENT_TIMEOUT_LIST" in listed.content.decode()


def test_the_timeout_is_set_for_the_block_only_and_restored_inside_an_outer_transaction(settings):
    settings.STATEMENT_TIMEOUT_SEARCH = 0.25
    before = _show()
    with statement_timeout("search"):
        left = _show()  # the query runs under what is left of the block's budget
        assert left.endswith("ms") and 0 < int(left.removesuffix("ms")) <= 250
    assert _show() == before
    with pytest.raises(StatementTimeout) as caught, statement_timeout("search"), connection.cursor() as cur:
        cur.execute(f"SELECT {SLEEP}")
    assert caught.value.status == 503 and caught.value.setting == "LESSONBOARD_STATEMENT_TIMEOUT_SEARCH"
    assert _show() == before
    assert Lesson.objects.count() == 0  # the connection still answers after the cancelled statement


def test_the_budget_is_for_the_block_not_each_statement(settings):
    """Statements that each finish inside the limit still cannot add up past it: the budget is shared."""
    settings.STATEMENT_TIMEOUT_RETRIEVE = 0.3
    with pytest.raises(StatementTimeout), statement_timeout("retrieve"), connection.cursor() as cur:
        for _ in range(20):
            cur.execute("SELECT pg_sleep(0.1)")  # 0.1 s each, well inside 0.3 s; the 4th has no budget left
    assert Lesson.objects.count() == 0
