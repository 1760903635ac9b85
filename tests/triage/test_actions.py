"""Retry and purge from the pages: permission-checked in the view, audited, and the bulk preview."""

from __future__ import annotations

from typing import Any

import pytest

from lessonboard.models import AuditEvent
from lessonq.models import Job, JobState
from lessonq.paths import dlq, wal
from lessonq.triage.models import BulkAction

pytestmark = pytest.mark.django_db


def state(job: Any) -> str:
    return Job.objects.get(pk=job.pk).state


@pytest.mark.parametrize(
    "path",
    ["/queue/jobs/{id}/retry", "/queue/jobs/{id}/purge", "/queue/bulk/preview", "/queue/bulk/start"],
)
def test_it_refuses_a_viewer_posting_directly_and_changes_nothing(
    client_as: Any, carol: Any, bob: Any, jobs: Any, path: str
) -> None:
    job = jobs()
    for user in (carol, bob):  # a viewer, and a reviewer (no operate_queue either)
        response = client_as(user).post(
            path.format(id=job.id), {"kind": "retry", "scope": "selection", "ids": [job.id], "tab": "dead"}
        )
        assert response.status_code == 403
    assert state(job) == JobState.DEAD and dlq().exists(job.id) and not wal().exists(job.id)
    assert not AuditEvent.objects.exists() and not BulkAction.objects.exists()


def test_it_refuses_get_on_actions(client_as: Any, alice: Any, jobs: Any) -> None:
    job = jobs()
    assert client_as(alice).get(f"/queue/jobs/{job.id}/retry").status_code == 405
    assert state(job) == JobState.DEAD


def test_an_operator_retries_one_job(client_as: Any, alice: Any, jobs: Any) -> None:
    job = jobs(attempts=3)
    response = client_as(alice).post(f"/queue/jobs/{job.id}/retry", {"next": "/queue/?tab=dead"})
    assert response.status_code == 302 and response["Location"] == "/queue/?tab=dead"
    fresh = Job.objects.get(pk=job.pk)
    assert (fresh.state, fresh.attempts) == (JobState.PENDING, 0)
    assert wal().exists(job.id) and not dlq().exists(job.id)
    event = AuditEvent.objects.get(action="queue.dlq_retry")
    assert event.actor_user == alice and event.object_ids == [job.id]


def test_an_operator_purges_one_job(client_as: Any, alice: Any, jobs: Any) -> None:
    job = jobs()
    response = client_as(alice).post(f"/queue/jobs/{job.id}/purge", follow=True)
    assert state(job) == JobState.PURGED and not dlq().exists(job.id)
    assert f"Job {job.id} purged." in response.content.decode()
    assert AuditEvent.objects.filter(action="queue.dlq_purge", actor_user=alice, object_ids=[job.id]).exists()


def test_it_does_not_purge_a_job_that_is_not_dead(client_as: Any, alice: Any, jobs: Any) -> None:
    job = jobs(state=JobState.PENDING)
    response = client_as(alice).post(f"/queue/jobs/{job.id}/purge", follow=True)
    assert state(job) == JobState.PENDING and "is no longer dead" in response.content.decode()


def test_retrying_a_job_no_longer_dead_says_so(client_as: Any, alice: Any, jobs: Any) -> None:
    job = jobs(state=JobState.SUCCEEDED)
    response = client_as(alice).post(f"/queue/jobs/{job.id}/retry", follow=True)
    body = response.content.decode()  # in words for a person, not the runner's "dlq entry … not found"
    assert "is no longer dead" in body and "dlq entry" not in body and state(job) == JobState.SUCCEEDED


def test_the_preview_counts_a_selection_with_its_eligibility(client_as: Any, alice: Any, jobs: Any) -> None:
    dead = [jobs(), jobs()]
    pending = jobs(state=JobState.PENDING)
    remote = jobs(node="lessonq.elsewhere")
    ids = [j.id for j in [*dead, pending, remote]] + ["00000000000000ff"]
    response = client_as(alice).post(
        "/queue/bulk/preview?scope=selection", {"kind": "retry", "ids": ids, "tab": "dead"}
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "data-matched>4<" in html and "data-eligible>3<" in html and "<strong data-will-run>3<" in html
    assert "not dead: pending" in html and "not found" in html and "On node lessonq.elsewhere" in html
    assert all(state(j) == JobState.DEAD for j in dead)  # a preview changes nothing
    assert not BulkAction.objects.exists()


def test_the_preview_over_a_filter_shows_the_cap(client_as: Any, alice: Any, jobs: Any, settings: Any) -> None:
    settings.LESSONQ_BULK_CAP = 2
    for _ in range(3):
        jobs(agent="codex")
    jobs(agent="other")
    html = (
        client_as(alice)
        .post("/queue/bulk/preview?scope=filter", {"kind": "purge", "tab": "dead", "agent": "codex"})
        .content.decode()
    )
    assert "data-matched>3<" in html and "data-over-cap>1 left" in html and "<strong data-will-run>2<" in html
    assert 'name="agent" value="codex"' in html and "data-confirm=" in html  # purge asks once more


def test_the_preview_rejects_bad_ids_and_empty_selections(client_as: Any, alice: Any, queue_dir: Any) -> None:
    client = client_as(alice)
    bad = client.post("/queue/bulk/preview?scope=selection", {"kind": "retry", "ids": ["../../etc/passwd"]})
    assert bad.status_code == 400 and "invalid job id" in bad.content.decode()
    empty = client.post("/queue/bulk/preview?scope=selection", {"kind": "retry"})
    assert empty.status_code == 400 and "Select at least one job" in empty.content.decode()


def test_the_admin_lists_bulk_actions_and_retention_runs(
    client_as: Any, admin_user: Any, alice: Any, jobs: Any
) -> None:
    from lessonq import bulk

    action = bulk.start("retry", [jobs().id], scope="selection", filter={"tab": "dead"}, matched=1, user=alice)
    client = client_as(admin_user)
    assert client.get("/admin/queue/bulkaction/").status_code == 200
    assert client.get(f"/admin/queue/bulkaction/{action.pk}/change/").status_code == 200
    assert client.get("/admin/queue/retentionrun/").status_code == 200


def test_the_bulk_page_renders_in_full_and_polls_while_unfinished(
    client_as: Any, carol: Any, alice: Any, jobs: Any
) -> None:
    from lessonq import bulk

    action = bulk.start(
        "purge", [jobs().id], scope="filter", filter={"tab": "dead", "agent": "x"}, matched=1, user=alice
    )
    html = client_as(carol).get(f"/queue/bulk/{action.pk}/").content.decode()
    assert "<html" in html and "Bulk purge #" in html and "data-poll" in html and "agent=x" in html
    assert 'hx-trigger="every 1s, visible-again from:body"' in html


def test_the_retention_task_is_scheduled_and_registered(settings: Any) -> None:
    from lessonboard.celery import app

    app.loader.import_default_modules()
    assert settings.CELERY_BEAT_SCHEDULE["lessonq-retention"]["task"] == "lessonq.retention.enforce_all"
    assert {"lessonq.retention.enforce_all", "lessonq.retention.enforce", "lessonq.bulk.run_bulk_action"} <= set(
        app.tasks
    )
