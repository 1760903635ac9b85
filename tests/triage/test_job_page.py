"""The job detail page: request, attempts, timeline, WAL record, "seen this before?"."""

from __future__ import annotations

from typing import Any

import pytest

from lessonq.models import JobState
from lessonq.paths import wal
from lessons.store import persist_lesson

pytestmark = pytest.mark.django_db


def test_it_shows_the_request_attempts_and_decoded_dlq_record(client_as: Any, carol: Any, jobs: Any) -> None:
    job = jobs(task="refactor <the> parser", error="transient: upstream 503 after 3 tries", attempts=3)
    response = client_as(carol).get(f"/queue/jobs/{job.id}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "refactor &lt;the&gt; parser" in html and "<details" in html and "the agent&#x27;s output" in html
    assert html.count("data-attempt=") == 3
    assert "<code>dlq/</code>" in html and f"{job.id}.wal" in html
    assert "&quot;ID&quot;: &quot;" + job.id in html  # the decoded envelope, escaped
    assert "attempt 3: permanent" in html  # timeline
    assert "Retry</button>" not in html  # a viewer gets no buttons


def test_it_shows_a_pending_jobs_wal_record_and_no_record_for_finished_ones(
    client_as: Any, carol: Any, jobs: Any
) -> None:
    pending = jobs(state=JobState.PENDING)
    wal().append(pending.wal_job())
    html = client_as(carol).get(f"/queue/jobs/{pending.id}/").content.decode()
    assert "<code>wal/</code>" in html
    done = jobs(state=JobState.SUCCEEDED)
    assert "No record on disk" in client_as(carol).get(f"/queue/jobs/{done.id}/").content.decode()


def test_it_shows_a_job_of_another_node_without_reading_files(client_as: Any, carol: Any, jobs: Any) -> None:
    job = jobs(node="lessonq.elsewhere")
    html = client_as(carol).get(f"/queue/jobs/{job.id}/").content.decode()
    assert "lives on node <code>lessonq.elsewhere</code>" in html


def test_it_finds_similar_dead_jobs_and_lessons(client_as: Any, alice: Any, jobs: Any) -> None:
    job = jobs(task="parse the go.mod file", error="permanent: open /repo/a/go.mod: no such file or directory")
    same = jobs(task="other", error="permanent: open /tmp/b/go.mod: no such file or directory")
    near = jobs(task="x", error="permanent: open go.mod: no such file or directory (module mode)")
    other = jobs(task="y", error="lessonq: job timed out")
    persist_lesson(
        situation="parse the go.mod file of a module",
        mistake="assumed go.mod exists in the working directory",
        correction="locate go.mod with go env GOMOD first",
        tags=["go"],
        trigger="error",
    )
    persist_lesson(
        situation="write a haiku", mistake="too many syllables", correction="count", tags=[], trigger="error"
    )
    html = client_as(alice).get(f"/queue/jobs/{job.id}/").content.decode()
    assert "1 other dead job</a> with the same error fingerprint" in html
    assert same.id in html and near.id in html and other.id not in html
    assert "locate go.mod with go env GOMOD first" in html and "write a haiku" not in html
    assert "Retry</button>" in html and "data-confirm=" in html


def test_it_404s_an_unknown_job(client_as: Any, carol: Any, queue_dir: Any) -> None:
    assert client_as(carol).get("/queue/jobs/0123456789abcdef/").status_code == 404
