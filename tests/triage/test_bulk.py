"""Bulk retry/purge over a selection or a filter, run by a real Celery worker process: count preview,
cap, per-item results, cancel, audit rows, and the progress fragment that stops polling when done."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from lessonboard.models import AuditEvent
from lessonq import bulk
from lessonq.models import Job, JobState
from lessonq.paths import dlq, wal
from lessonq.triage.models import BulkAction, BulkItem, BulkState
from tests.support.locks import job_row_locked
from tests.support.processes import CeleryWorker
from tests.support.wait import wait_for
from tests.triage.conftest import hx


def finished(bulk_id: int) -> BulkAction | None:
    action = BulkAction.objects.get(pk=bulk_id)
    return action if action.is_finished else None


def start_from_page(client: Any, path: str, data: dict[str, Any]) -> int:
    response = client.post(path, data)
    assert response.status_code == 302, response.content.decode()[:500]
    return int(response["Location"].rstrip("/").rsplit("/", 1)[1])


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_it_retries_everything_matching_a_filter_up_to_the_cap(
    client_as: Any, alice: Any, jobs: Any, bulk_worker: CeleryWorker, settings: Any
) -> None:
    settings.LESSONQ_BULK_CAP = 5
    now = timezone.now()
    matching = [jobs(agent="codex", enqueued_at=now.replace(microsecond=0)) for _ in range(7)]  # equal times
    others = [jobs(agent="claude"), jobs(agent="codex", state=JobState.PENDING)]
    client = client_as(alice)
    filter_ = {"tab": "dead", "agent": "codex"}
    preview = client.post("/queue/bulk/preview?scope=filter", {"kind": "retry", **filter_}).content.decode()
    assert "data-matched>7<" in preview and "data-over-cap>2 left" in preview
    bulk_id = start_from_page(client, "/queue/bulk/start", {"kind": "retry", "scope": "filter", **filter_})
    action = wait_for(lambda: finished(bulk_id), timeout=60, what="bulk retry finished")
    assert (action.state, action.total, action.processed, action.succeeded, action.failed) == ("done", 5, 5, 5, 0)
    retried = set(BulkItem.objects.filter(bulk_id=bulk_id).values_list("job_id", flat=True))
    assert len(retried) == 5 and retried <= {j.id for j in matching}
    assert {j.id for j in Job.objects.filter(state=JobState.PENDING, agent="codex", pk__in=retried)} == retried
    assert all(wal().exists(i) and not dlq().exists(i) for i in retried)
    assert Job.objects.filter(pk__in=[j.id for j in matching], state=JobState.DEAD).count() == 2  # over the cap
    assert Job.objects.get(pk=others[0].id).state == JobState.DEAD
    event = AuditEvent.objects.get(action="queue.bulk_retry")
    assert event.actor_user == alice and event.filter == {"scope": "filter", **filter_}
    assert event.result["items"] == dict.fromkeys(retried, "done") and event.result["matched"] == 7
    batches = AuditEvent.objects.filter(action="queue.dlq_retry", reason=f"bulk retry #{bulk_id}")
    assert sorted(i for event in batches for i in event.object_ids) == sorted(retried)  # each retry audited once
    done = hx(client, f"/queue/bulk/{bulk_id}/")
    assert done.status_code == 286 and "data-poll" not in done.content.decode()  # polling stops


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_it_purges_a_selection_and_reports_each_item(
    client_as: Any, alice: Any, jobs: Any, bulk_worker: CeleryWorker
) -> None:
    good = [jobs(), jobs()]
    lost = jobs(record=False)  # its DLQ record is gone: retry must report it, not stop
    bulk_id = start_from_page(
        client_as(alice),
        "/queue/bulk/start",
        {"kind": "retry", "scope": "selection", "tab": "dead", "ids": [j.id for j in [*good, lost]]},
    )
    action = wait_for(lambda: finished(bulk_id), timeout=60, what="bulk finished")
    assert (action.state, action.succeeded, action.failed) == ("done", 2, 1)
    failed = BulkItem.objects.get(bulk_id=bulk_id, job_id=lost.id)
    assert failed.outcome == "failed" and f"dlq entry {lost.id} not found" in failed.message
    items = AuditEvent.objects.get(action="queue.bulk_retry").result["items"]
    assert items[lost.id].startswith("failed: lessonq runner: dlq entry") and items[good[0].id] == "done"
    page = client_as(alice).get(f"/queue/bulk/{bulk_id}/").content.decode()
    assert f"dlq entry {lost.id} not found" in page


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_it_cancels_a_running_bulk_action_between_chunks(
    client_as: Any, alice: Any, jobs: Any, bulk_worker: CeleryWorker
) -> None:
    made = [jobs(agent="many") for _ in range(2 * bulk.CHUNK + 10)]
    order = sorted(made, key=lambda j: (j.enqueued_at, j.id), reverse=True)  # the page's order: newest first
    victim = order[2].id
    with job_row_locked(victim):  # the worker blocks on this job's row until we let go
        client = client_as(alice)
        bulk_id = start_from_page(
            client, "/queue/bulk/start", {"kind": "retry", "scope": "filter", "tab": "dead", "agent": "many"}
        )
        wait_for(lambda: BulkAction.objects.get(pk=bulk_id).state == BulkState.RUNNING, timeout=30, what="running")
        running = hx(client, f"/queue/bulk/{bulk_id}/")
        assert running.status_code == 200 and "data-poll" in running.content.decode()
        assert client.post(f"/queue/bulk/{bulk_id}/cancel").status_code == 302
        assert BulkAction.objects.get(pk=bulk_id).state == BulkState.CANCELLING
    action = wait_for(lambda: finished(bulk_id), timeout=60, what="bulk cancelled")
    assert (action.state, action.processed) == ("cancelled", bulk.CHUNK)
    assert BulkItem.objects.filter(bulk_id=bulk_id, outcome="cancelled").count() == len(made) - bulk.CHUNK
    assert Job.objects.filter(agent="many", state=JobState.PENDING).count() == bulk.CHUNK
    assert Job.objects.filter(agent="many", state=JobState.DEAD).count() == len(made) - bulk.CHUNK
    assert AuditEvent.objects.get(action="queue.bulk_retry").result["state"] == "cancelled"
    assert AuditEvent.objects.filter(action="queue.bulk_cancel", actor_user=alice).exists()


@pytest.mark.django_db
def test_a_queued_bulk_action_cancelled_before_it_starts_never_runs(client_as: Any, alice: Any, jobs: Any) -> None:
    job = jobs()
    action = bulk.start("purge", [job.id], scope="selection", filter={"tab": "dead"}, matched=1, user=alice)
    assert client_as(alice).post(f"/queue/bulk/{action.pk}/cancel").status_code == 302
    action.refresh_from_db()
    assert action.state == BulkState.CANCELLED
    assert bulk.run(action.pk) == "not queued"  # a late delivery of its message does nothing
    assert Job.objects.get(pk=job.id).state == JobState.DEAD and dlq().exists(job.id)
    assert AuditEvent.objects.get(action="queue.bulk_purge").result["items"] == {job.id: "cancelled"}


@pytest.mark.django_db
def test_a_bulk_action_whose_runner_died_is_finished_by_the_next_delivery(alice: Any, jobs: Any) -> None:
    """The worker killed mid-run: the message comes back (reject on worker lost), finds the action still
    running and the runner's lock free, and finishes it from the first item without an outcome; while a
    runner holds the lock, another delivery leaves it alone."""
    from django.db import connection, connections

    made = [jobs(agent="orphan") for _ in range(3)]
    action = bulk.start("purge", [j.id for j in made], scope="selection", filter={}, matched=3, user=alice)
    # What the dead runner left: the action running, the first item done, the rest without an outcome.
    BulkAction.objects.filter(pk=action.pk).update(state=BulkState.RUNNING, started_at=timezone.now(), processed=1)
    first = BulkItem.objects.get(bulk=action, position=0)
    bulk.dlq.purge(first.job_id, user=alice)
    BulkItem.objects.filter(pk=first.pk).update(outcome="done")

    other = connections.create_connection("default")  # a live runner elsewhere holds the lock
    assert other.settings_dict["NAME"] == connection.settings_dict["NAME"]
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", [bulk.RUNNER_LOCK, action.pk])
        assert bulk.run(action.pk) == "running elsewhere"
        assert BulkItem.objects.filter(bulk=action, outcome="").count() == 2
    finally:
        other.close()  # its session ends: the lock goes with it, as a killed worker's does
    from tests.support.wait import wait_for

    def lock_gone() -> bool:  # the server lets go once the closed session's backend has ended
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s::oid AND objid = %s::oid",
                [bulk.RUNNER_LOCK, action.pk],
            )
            return cursor.fetchone()[0] == 0

    wait_for(lock_gone, timeout=30, what="the closed session's lock to go")
    assert bulk.run(action.pk) == "done"
    action.refresh_from_db()
    assert (action.state, action.processed) == ("done", 3)
    assert Job.objects.filter(agent="orphan", state=JobState.PURGED).count() == 3
    assert AuditEvent.objects.get(action="queue.bulk_purge").result["items"] == {j.id: "done" for j in made}
    assert bulk.run(action.pk) == "not queued"  # a late delivery after the end does nothing


@pytest.mark.django_db
def test_a_viewer_cannot_cancel(client_as: Any, alice: Any, carol: Any, jobs: Any) -> None:
    action = bulk.start("retry", [jobs().id], scope="selection", filter={}, matched=1, user=alice)
    assert client_as(carol).post(f"/queue/bulk/{action.pk}/cancel").status_code == 403
    assert BulkAction.objects.get(pk=action.pk).state == BulkState.QUEUED
    page = client_as(carol).get(f"/queue/bulk/{action.pk}/")
    assert page.status_code == 200 and "data-cancel-bulk" not in page.content.decode()
