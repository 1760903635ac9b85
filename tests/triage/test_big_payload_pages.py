"""Pages load what they show: list pages select payload columns only as SQL-cut previews, and the job
page shows a bounded preview with a download of the full text (bench/bench_big_payload_pages.py measures
the speed and memory of it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from lessonboard.models import AuditEvent
from lessonq.models import DETAIL_PREVIEW_CHARS, Job, JobState
from lessons.models import Lesson
from lessons.review.models import Proposal, ReviewRun
from refine.models import RefineRun, RunStatus
from tests.support.queue import make_job

pytestmark = pytest.mark.django_db

MIB = 1 << 20


def big(label: str, size: int = MIB // 2) -> str:
    """A payload of ``size`` characters that starts with ``label`` and ends with a marker."""
    line = f"{label} line of a long agent transcript with some words in it\n"
    body = (line * (size // len(line) + 1))[: size - 20]
    return body + f"END-OF-{label}"


def selected_columns(sql: str) -> str:
    """The select list of a query, with what is computed in SQL (previews, sizes, comparisons) taken out."""
    head = sql.split(" FROM ", 1)[0]
    head = re.sub(r"(LEFT|OCTET_LENGTH|JSONB_ARRAY_LENGTH)\((\([^()]*\)|[^()])*\)", "", head, flags=re.I)
    head = re.sub(r"CASE WHEN .*? END", "", head)
    return head


def full_columns_loaded(queries: list[dict[str, Any]], table: str, columns: tuple[str, ...]) -> list[str]:
    loaded = []
    for q in queries:
        head = selected_columns(q["sql"])
        for column in columns:
            if f'"{table}"."{column}"' in head:
                loaded.append(f"{column} in: {q['sql'][:200]}")
    return loaded


def get(client: Any, url: str) -> tuple[Any, list[dict[str, Any]]]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
        body = b"".join(response.streaming_content) if response.streaming else response.content
    assert response.status_code == 200, url
    return body, ctx.captured_queries


@pytest.fixture
def page(client_as: Callable[[Any], Any], alice: Any) -> Any:
    return client_as(alice)


def test_queue_tabs_never_load_whole_payloads(queue_dir, page):
    for n in range(3):
        job = make_job(state=JobState.DEAD, task=big(f"dead{n}"), error=big(f"err{n}", 20_000))
        Job.objects.filter(pk=job.pk).update(output=big(f"out{n}"), outcome=big(f"outcome{n}"))
        done = make_job(state=JobState.SUCCEEDED, task=big(f"done{n}"))
        Job.objects.filter(pk=done.pk).update(output=big(f"dout{n}"))
    for tab in ("dead", "done"):
        body, queries = get(page, f"/queue/?tab={tab}")
        assert full_columns_loaded(queries, "queue_job", ("task", "output", "outcome", "last_error")) == []
        assert len(body) < 200_000  # jobs of 1.5 MiB: a few hundred bytes each on the page
        assert b"line of a long agent transcript" in body  # the previews are there
    assert b"dead0 line" in get(page, "/queue/?tab=dead")[0]
    assert b"done0 line" in get(page, "/queue/?tab=done")[0]


def test_the_job_page_shows_a_bounded_preview_and_downloads_the_full_text(queue_dir, page):
    task, output = big("task"), big("output", 3 * MIB // 2 + 7)
    job = make_job(state=JobState.DEAD, task=task, error="boom")
    Job.objects.filter(pk=job.pk).update(output=output)
    body, queries = get(page, f"/queue/jobs/{job.pk}/")
    assert full_columns_loaded(queries, "queue_job", ("task", "output", "outcome", "last_error")) == []
    html = body.decode()
    assert task[:DETAIL_PREVIEW_CHARS] in html and task[: DETAIL_PREVIEW_CHARS + 1] not in html
    assert "END-OF-task" not in html and len(body) < 300_000
    assert f'href="/queue/jobs/{job.pk}/text/task"' in html and f'href="/queue/jobs/{job.pk}/text/output"' in html
    assert 'data-truncated="outcome"' not in html  # a short payload is shown whole, no download needed
    downloaded, _ = get(page, f"/queue/jobs/{job.pk}/text/output")
    assert downloaded.decode() == output
    assert get(page, f"/queue/jobs/{job.pk}/text/task")[0].decode() == task
    assert page.get(f"/queue/jobs/{job.pk}/text/password").status_code == 404


def test_a_viewer_needs_to_log_in_to_download(queue_dir, client):
    job = make_job(state=JobState.DEAD, task="secret task")
    response = client.get(f"/queue/jobs/{job.pk}/text/task")
    assert response.status_code in (302, 403) and b"secret task" not in b"".join(
        getattr(response, "streaming_content", [response.content])
    )


def test_other_lists_cut_their_texts_in_sql(client_as, admin_user):
    page = client_as(admin_user)
    huge = big("huge")
    for n in range(2):
        Lesson.objects.create(situation=huge, mistake=huge, correction=huge, content=huge, fact_id=f"{n:024x}")
        RefineRun.objects.create(
            task=huge, original_draft=huge, final_output=huge + "!", status=RunStatus.DONE, error=huge
        )
    AuditEvent.record("bulk.retry", object_type="queue.job", object_ids=[f"{n:016x}" for n in range(20_000)])
    from lessonboard.models import Workspace

    workspace = Workspace.objects.for_slug("acme")
    run = ReviewRun.objects.create(workspace=workspace, summary="s")
    for status, decision in (("pending", ""), ("rejected", "rejected")):
        Proposal.objects.create(
            run=run,
            workspace=workspace,
            target="memory",
            op="add",
            content=huge,
            score=0.5,
            status=status,
            decision=decision,
            auto_approve=False,
            reason=huge,
        )
    checks = {
        "/lessons/": ("lessons_lesson", ("situation", "mistake", "correction", "content")),
        "/refine/": ("refine_refinerun", ("task", "original_draft", "final_output", "error")),
        "/audit/": ("lessonboard_auditevent", ("object_ids", "result", "filter", "reason")),
        "/reviews/": ("lessons_proposal", ("content", "old_text", "reason")),
        "/reviews/decisions/": ("lessons_proposal", ("content", "old_text", "reason")),
    }
    for url, (table, columns) in checks.items():
        body, queries = get(page, url)
        assert full_columns_loaded(queries, table, columns) == [], url
        assert len(body) < 300_000, url
    refine = get(page, "/refine/")[0].decode()
    assert "rewrote draft" in refine  # the outcome compares the texts in SQL
