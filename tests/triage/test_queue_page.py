"""The queue page: tabs with cached counts, filters in the URL, search, sort, keyset pages."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone

from lessonq.models import Job, JobState
from lessonq.triage import queries as triage
from tests.factories import WorkspaceFactory
from tests.triage.conftest import hx

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    cache.delete_many([triage.COUNTS_KEY, triage.GROUPS_KEY])


def test_it_renders_the_full_page_with_tabs_and_counts(client_as: Any, carol: Any, jobs: Any) -> None:
    jobs(state=JobState.DEAD)
    jobs(state=JobState.DEAD)
    jobs(state=JobState.PENDING)
    response = client_as(carol).get("/queue/")
    html = response.content.decode()
    assert response.status_code == 200 and "<html" in html
    assert 'data-count="dead">2<' in html and 'data-count="pending">1<' in html
    assert 'href="/queue/">Queue</a>' in html or ">Queue</a>" in html  # the nav entry
    assert "Retry selected" not in html  # a viewer sees no action buttons


def test_it_answers_htmx_with_the_results_fragment_only(client_as: Any, alice: Any, jobs: Any) -> None:
    job = jobs(task="a dead one")
    response = hx(client_as(alice), "/queue/", {"tab": "dead"})
    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert html.lstrip().startswith('<section id="results"') and job.id in html and "Retry selected" in html
    assert '<nav id="tabs" class="tabs" aria-label="Job states" hx-swap-oob="true"' in html  # tab links follow


def test_it_serves_live_counts_as_a_polling_fragment(client_as: Any, carol: Any, jobs: Any) -> None:
    jobs()
    html = hx(client_as(carol), "/queue/counts").content.decode()
    assert "<html" not in html and "data-poll" in html and "every 10s, visible-again from:body" in html
    assert 'data-count="dead">1<' in html


def test_it_caches_counts_for_every_viewer_and_forgets_them_after_an_action(
    client_as: Any, alice: Any, carol: Any, jobs: Any, settings: Any
) -> None:
    settings.LESSONQ_COUNTS_TTL = 60
    job = jobs()
    assert triage.tab_counts()["dead"].value == 1
    jobs()
    assert 'data-count="dead">1<' in hx(client_as(carol), "/queue/counts").content.decode()  # cached
    client_as(alice).post(f"/queue/jobs/{job.id}/purge")
    assert 'data-count="dead">1<' in hx(client_as(carol), "/queue/counts").content.decode()  # 2 - 1 purged


def test_it_estimates_counts_above_the_exact_limit(jobs: Any, settings: Any) -> None:
    settings.LESSONQ_EXACT_COUNT_LIMIT = 3
    for _ in range(5):
        jobs()
    jobs(state=JobState.PENDING)
    counts = triage.tab_counts(fresh=True)
    assert counts["dead"].estimated and counts["dead"].value >= 3
    assert counts["pending"] == triage.TabCount(1, estimated=False)


def test_it_filters_by_trigger_agent_workspace_group_age_and_text(client_as: Any, carol: Any, jobs: Any) -> None:
    now = timezone.now()
    ws = WorkspaceFactory(slug="billing")
    target = jobs(
        task="migrate the invoices table",
        error="permanent: disk quota exceeded on /srv/db/x",
        trigger="hallucination",
        agent="codex",
        workspace=ws,
        enqueued_at=now - timedelta(hours=2),
    )
    docs = jobs(
        task="write docs",
        error="permanent: disk quota exceeded on /srv/db/y",
        agent="claude",
        enqueued_at=now - timedelta(days=3),
    )
    jobs(task="unrelated", error="permanent: something else", enqueued_at=now - timedelta(minutes=5))
    client = client_as(carol)

    def ids(**params: str) -> set[str]:
        html = hx(client, "/queue/", {"tab": "dead", **params}).content.decode()
        return {j.id for j in Job.objects.all() if f'data-job="{j.id}"' in html}

    assert ids(trigger="hallucination") == {target.id}
    assert ids(agent="codex") == {target.id}
    assert ids(workspace="billing") == {target.id}
    assert ids(group=Job.objects.get(pk=target.id).fingerprint) == {target.id}  # same error, other trigger
    sibling = jobs(
        task="more docs", error="permanent: disk quota exceeded on /srv/db/z", enqueued_at=now - timedelta(days=2)
    )
    assert ids(group=Job.objects.get(pk=docs.id).fingerprint) == {docs.id, sibling.id}
    assert ids(newer="24h", older="1h") == {target.id}
    assert ids(q="INVOICES") == {target.id}  # case-insensitive, in the task
    assert len(ids(q="quota exceeded")) == 3  # in the error
    assert ids(q=target.id) == {target.id}
    assert len(ids()) == 4


def test_it_keeps_the_filter_in_next_page_links(client_as: Any, carol: Any, jobs: Any, settings: Any) -> None:
    settings.LESSONQ_TRIAGE_PAGE_SIZE = 2
    for _ in range(3):
        jobs(agent="codex")
    html = client_as(carol).get("/queue/", {"tab": "dead", "agent": "codex", "sort": "attempts"}).content.decode()
    assert "agent=codex" in html and "sort=attempts" in html and "after=" in html


def test_it_sorts_by_attempts(client_as: Any, carol: Any, jobs: Any) -> None:
    few, many = jobs(attempts=1), jobs(attempts=4)
    html = hx(client_as(carol), "/queue/", {"tab": "dead", "sort": "attempts"}).content.decode()
    assert html.index(many.id) < html.index(few.id)


@pytest.mark.parametrize("sort", ["newest", "oldest", "attempts"])
def test_it_returns_every_row_exactly_once_across_pages_with_equal_timestamps(jobs: Any, sort: str) -> None:
    same = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    made = {jobs(enqueued_at=same + timedelta(seconds=i % 3), attempts=1 + i % 2, record=False).id for i in range(47)}
    jobs(state=JobState.PENDING, enqueued_at=same)  # another tab: never listed
    seen: list[str] = []
    cursor = None
    while True:
        page = triage.keyset(triage.JobFilter(tab="dead", sort=sort).apply(), sort=sort, cursor=cursor, size=5)
        seen.extend(j.id for j in page.rows)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(seen) == len(made) and set(seen) == made


def cursor_of(values: Any) -> str:
    """A cursor as the page encodes one (base64 of JSON; text given as is, for what JSON cannot make)."""
    import base64
    import json

    raw = values if isinstance(values, str) else json.dumps(values)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("sort", "values"),
    [
        ("newest", "not-a-cursor!"),
        ("newest", ["2024-01-01T00:00:00+00:00", None]),  # Q(id__lt=None): a ValueError
        ("newest", ["2024-01-01T00:00:00", "0000000000000000"]),  # a naive time
        ("newest", [5, "0000000000000000"]),
        ("attempts", ["abc", "2024-01-01T00:00:00+00:00", "0000000000000000"]),  # not a number
        ("attempts", [{}, "2024-01-01T00:00:00+00:00", "0000000000000000"]),  # a TypeError
        ("attempts", [10**30, "2024-01-01T00:00:00+00:00", "0000000000000000"]),
        ("oldest", ["2024-01-01T00:00:00+00:00", "x\u0000"]),  # a NUL: PostgreSQL refuses it
        ("newest", "[" * 5000),  # RecursionError in the JSON reader
    ],
)
def test_it_starts_from_the_top_on_a_hand_edited_cursor(
    client_as: Any, carol: Any, jobs: Any, api: Any, sort: str, values: Any
) -> None:
    job = jobs()
    after = values if values == "not-a-cursor!" else cursor_of(values)
    response = client_as(carol).get("/queue/", {"tab": "dead", "sort": sort, "after": after})
    assert response.status_code == 200 and job.id in response.content.decode()
    operator = api.get("/api/v1/operator/dlq", {"sort": sort, "after": after})
    assert operator.status_code in (200, 400), operator.content[:300]


def test_it_escapes_job_text(client_as: Any, carol: Any, jobs: Any) -> None:
    jobs(task="<script>alert(1)</script>", error="<img src=x onerror=alert(1)>")
    html = client_as(carol).get("/queue/").content.decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;" in html and "<img src=x" not in html


def test_every_finished_tab_searches_through_the_trigram_index(jobs: Any) -> None:
    from django.db import connection

    jobs(task="needle in a haystack")
    now = timezone.now()
    Job.objects.bulk_create(  # enough finished rows (and heap pages) that scanning them costs more than the index
        Job(
            id=f"{i:016x}",
            node="lessonq.elsewhere",
            state=(JobState.DEAD, JobState.SUCCEEDED, JobState.EXPIRED)[i % 3],
            finished_at=now,
            task=f"haystack straw number {i} " * 20,
            trigger="error",
            last_error=f"boom {i}",
            enqueued_at=now,
            next_attempt_at=now,
        )
        for i in range(20_000)
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE queue_job")
        # The error-groups index also lists every dead row; at this size the planner may prefer reading
        # them all through it. Dropped inside the test's transaction (rolled back) to see the text indexes.
        cur.execute("DROP INDEX queue_job_dead_fp")
        cur.execute("SET enable_seqscan = off")
        plans = {}
        for tab in triage.INDEXED_TABS:  # partial indexes over every finished state, on the excerpts
            qs = triage.JobFilter(tab=tab, q="needle").apply()
            sql, params = qs.query.sql_with_params()
            cur.execute(f"EXPLAIN {sql}", params)
            plans[tab] = "\n".join(row[0] for row in cur.fetchall())
        cur.execute("SET enable_seqscan = on")
    for tab, plan in plans.items():
        assert "queue_job_finished_task_trgm" in plan and "queue_job_finished_error_trgm" in plan, (tab, plan)


def test_text_search_reads_the_payloads_excerpt_not_the_whole_payload(client_as: Any, carol: Any, jobs: Any) -> None:
    near = jobs(task="needle-early " + "x" * 100)
    far = jobs(task="x" * triage.SEARCH_EXCERPT_CHARS + " needle-late")
    html = client_as(carol).get("/queue/", {"tab": "dead", "q": "needle"}).content.decode()
    assert near.id in html and far.id not in html  # past the indexed 2,000 characters: not searched


def test_a_search_too_short_for_the_index_is_refused_with_a_message(client_as: Any, carol: Any, jobs: Any) -> None:
    job = jobs(task="zz top", state=JobState.SUCCEEDED)
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now())
    response = client_as(carol).get("/queue/", {"tab": "done", "q": "zz"})
    html = response.content.decode()
    assert response.status_code == 200 and 'id="search-refused"' in html and "at least 3 characters" in html
    assert f'data-job="{job.id}"' not in html and job.id not in html.split('id="search-refused"')[1]
    by_id = client_as(carol).get("/queue/", {"tab": "done", "q": job.id}).content.decode()
    assert job.id in by_id and 'id="search-refused"' not in by_id  # a job id is still found


def test_search_on_an_active_tab_is_refused_while_it_is_too_big_for_a_scan(
    client_as: Any, carol: Any, jobs: Any, settings: Any
) -> None:
    jobs(task="needle waiting", state=JobState.PENDING)
    assert "needle waiting" in client_as(carol).get("/queue/", {"tab": "pending", "q": "needle"}).content.decode()
    jobs(task="another", state=JobState.PENDING)
    settings.LESSONQ_EXACT_COUNT_LIMIT = 1
    cache.delete_many([triage.COUNTS_KEY])
    html = client_as(carol).get("/queue/", {"tab": "pending", "q": "needle"}).content.decode()
    assert 'id="search-refused"' in html and "more than 1 jobs" in html and "needle waiting" not in html
