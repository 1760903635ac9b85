"""Replay and the sweeper restore the WAL ⇄ row invariant after a crash at any step (docs/architecture.md#crash-points)."""

from __future__ import annotations

import socket
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from lessonq import gojson, reconcile
from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job, JobState
from lessonq.paths import dlq, expired_dir, wal
from lessonq.wal import WalJob, frame
from tests.support.locks import job_row_locked

pytestmark = pytest.mark.django_db


def accepted(task: str = "t") -> str:
    return enqueue(LessonRequest(task=task, attempt="a", outcome="ERROR: x", trigger="error")).job_id


def test_it_adopts_wal_records_without_rows(queue_dir: Path, fake_openai: Any) -> None:
    now = timezone.now()
    record = WalJob(
        id="00000000000000aa",
        task="from chatcli",
        trigger="error",
        enqueued_at=gojson.local(now),
        next_attempt_at=gojson.local(now + timedelta(hours=1)),
        attempts=2,
        last_error="503",
    )
    wal().append(record)
    report = reconcile.replay()
    job = Job.objects.get(pk=record.id)
    assert (report.adopted, report.dispatched) == (1, 1)
    assert (job.task, job.attempts, job.last_error, job.state) == ("from chatcli", 2, "503", JobState.PENDING)
    assert job.next_attempt_at <= timezone.now()  # replay pulls future retries in, as chatcli
    assert job.dispatched_at is not None


def test_it_unlinks_the_wal_of_a_job_that_committed_success(queue_dir: Path, fake_openai: Any) -> None:
    job_id = accepted()
    Job.objects.filter(pk=job_id).update(state=JobState.SUCCEEDED)
    reconcile.sweep()
    assert not wal().exists(job_id)


def test_it_finishes_a_dlq_move_that_crashed_after_the_put(queue_dir: Path, fake_openai: Any) -> None:
    job_id = accepted()
    job = Job.objects.get(pk=job_id)
    dlq().append(job.wal_job().with_retry(attempts=5, next_attempt_at=job.wal_job().next_attempt_at, last_error="boom"))
    Job.objects.filter(pk=job_id).update(
        state=JobState.RUNNING, claimed_by="gone:1", claim_expires_at=timezone.now() - timedelta(seconds=1)
    )
    reconcile.sweep()
    assert Job.objects.get(pk=job_id).state == JobState.DEAD
    assert dlq().exists(job_id) and not wal().exists(job_id)


def test_it_unlinks_the_wal_after_a_dead_row_committed(queue_dir: Path, fake_openai: Any) -> None:
    job_id = accepted()
    dlq().append(Job.objects.get(pk=job_id).wal_job())
    Job.objects.filter(pk=job_id).update(state=JobState.DEAD)
    reconcile.sweep()
    assert dlq().exists(job_id) and not wal().exists(job_id)


def test_it_rewrites_missing_records_from_rows(queue_dir: Path, fake_openai: Any) -> None:
    job_id = accepted()
    wal().ack(job_id)
    dead_id = accepted("other")
    wal().ack(dead_id)
    Job.objects.filter(pk=dead_id).update(state=JobState.DEAD, last_error="x")
    reconcile.sweep()
    assert wal().read(job_id).task == "t"  # type: ignore[union-attr]
    assert dlq().read(dead_id).last_error == "x"  # type: ignore[union-attr]


def test_it_expires_stale_records_into_the_archive(queue_dir: Path, fake_openai: Any, settings: Any) -> None:
    settings.LESSONQ_STALE_AFTER = 3600
    old = timezone.now() - timedelta(hours=1, seconds=1)
    record = WalJob(id="00000000000000bb", task="old", enqueued_at=gojson.local(old), next_attempt_at=gojson.local(old))
    at_limit = timezone.now() - timedelta(seconds=3590)
    fresh = WalJob(
        id="00000000000000cc", task="fresh", enqueued_at=gojson.local(at_limit), next_attempt_at=gojson.local(at_limit)
    )
    wal().append(record)
    wal().append(fresh)
    report = reconcile.replay()
    assert report.expired == 1
    assert Job.objects.get(pk=record.id).state == JobState.EXPIRED
    assert (expired_dir() / f"{record.id}.wal").read_bytes() == frame(record.payload())
    assert not wal().exists(record.id) and wal().exists(fresh.id)
    assert Job.objects.get(pk=fresh.id).state == JobState.PENDING


def test_it_republishes_due_jobs_whose_message_was_lost(queue_dir: Path, fake_openai: Any, settings: Any) -> None:
    settings.LESSONQ_REDISPATCH_AFTER = 30
    job_id = accepted()
    long_ago = timezone.now() - timedelta(minutes=5)
    Job.objects.filter(pk=job_id).update(dispatched_at=long_ago, next_attempt_at=long_ago)
    assert reconcile.sweep().dispatched == 1
    assert Job.objects.get(pk=job_id).dispatched_at > long_ago  # type: ignore[operator]
    recent = accepted("recent")
    assert reconcile.sweep().dispatched == 0 and Job.objects.get(pk=recent).dispatched_at is not None
    # Still not started: the next re-publish backs off (30 s × 2^1), so a backlog is not flooded.
    assert Job.objects.get(pk=job_id).redispatches == 1
    Job.objects.filter(pk=job_id).update(dispatched_at=timezone.now() - timedelta(seconds=59))
    assert reconcile.sweep().dispatched == 0
    Job.objects.filter(pk=job_id).update(dispatched_at=timezone.now() - timedelta(seconds=61))
    assert reconcile.sweep().dispatched == 1 and Job.objects.get(pk=job_id).redispatches == 2


def test_it_republishes_running_jobs_whose_worker_died(queue_dir: Path, fake_openai: Any) -> None:
    job_id = accepted()
    Job.objects.filter(pk=job_id).update(
        state=JobState.RUNNING,
        claimed_by=f"{socket.gethostname()}:999999999",
        claim_expires_at=timezone.now() + timedelta(minutes=5),
        dispatched_at=timezone.now() - timedelta(hours=1),
    )
    assert reconcile.sweep().dispatched == 1
    assert reconcile.reclaimable() == [job_id]


def test_it_dispatches_deferred_jobs_once_an_llm_is_configured(
    queue_dir: Path, settings: Any, fake_openai: Any
) -> None:
    url = settings.LLM_BASE_URL
    settings.LLM_BASE_URL = ""
    job_id = accepted()
    assert Job.objects.get(pk=job_id).dispatched_at is None
    reconcile.sweep()
    assert "no LLM" in Job.objects.get(pk=job_id).waiting_reason
    settings.LLM_BASE_URL = url
    assert reconcile.sweep().dispatched == 1
    job = Job.objects.get(pk=job_id)
    assert job.dispatched_at is not None and job.waiting_reason == ""


def test_it_quarantines_corrupt_records_during_replay(queue_dir: Path, fake_openai: Any) -> None:
    (queue_dir / "wal" / "0000000000000001.wal").write_bytes(b"LSN1 torn")
    (queue_dir / "dlq" / "0000000000000002.wal").write_bytes(b"\xaa" * 64)
    report = reconcile.replay()
    assert report.quarantined == 2
    assert sorted(p.name for p in (queue_dir / "quarantine").iterdir()) == [
        "dlq-0000000000000002.wal",
        "dlq-0000000000000002.wal.reason",  # each with its reason beside it
        "wal-0000000000000001.wal",
        "wal-0000000000000001.wal.reason",
    ]
    assert (queue_dir / "quarantine" / "wal-0000000000000001.wal.reason").read_text() == "short header\n"


def test_it_bounds_dispatch_by_capacity_and_fills_up_later(queue_dir: Path, fake_openai: Any, settings: Any) -> None:
    from lessonq import metrics

    settings.LESSONQ_CAPACITY = 2
    settings.LESSONQ_BLOCK_TIMEOUT = 0
    ids = [accepted(f"job {i}") for i in range(3)]
    assert [Job.objects.get(pk=i).dispatched_at is not None for i in ids] == [True, True, False]
    assert "queue full" in Job.objects.get(pk=ids[2]).waiting_reason
    assert wal().count() == 3  # accepted into the WAL all the same
    Job.objects.filter(pk=ids[0]).update(state=JobState.SUCCEEDED)
    assert reconcile.sweep().dispatched == 1
    assert Job.objects.get(pk=ids[2]).dispatched_at is not None
    assert metrics.ENQUEUE.labels(outcome="rejected_full")._value.get() >= 1  # type: ignore[attr-defined]


def test_drop_oldest_defers_the_oldest_waiting_job(queue_dir: Path, fake_openai: Any, settings: Any) -> None:
    settings.LESSONQ_CAPACITY = 2
    settings.LESSONQ_DROP_OLDEST = True
    ids = [accepted(f"job {i}") for i in range(3)]
    states = {i: Job.objects.get(pk=i) for i in ids}
    assert states[ids[0]].dispatched_at is None and "dropped_oldest" in states[ids[0]].waiting_reason
    assert states[ids[1]].dispatched_at is not None and states[ids[2]].dispatched_at is not None
    assert wal().count() == 3


def test_stale_means_strictly_older_than_stale_after(settings: Any) -> None:
    settings.LESSONQ_STALE_AFTER = 3600
    now = timezone.now()
    at_limit = WalJob(id="00000000000000ee", enqueued_at=now - timedelta(seconds=3600))
    past_limit = WalJob(id="00000000000000ef", enqueued_at=now - timedelta(seconds=3600, microseconds=1))
    assert not reconcile._stale(at_limit, now) and reconcile._stale(past_limit, now)
    settings.LESSONQ_STALE_AFTER = 0
    assert not reconcile._stale(WalJob(id="00000000000000ef"), now)  # 0 disables expiry


def test_adopting_in_bulk_leaves_rows_a_producer_inserted_meanwhile(queue_dir: Path, fake_openai: Any) -> None:
    now = gojson.local(timezone.now())
    records = [
        WalJob(id=f"00000000000001{i:02x}", task=f"adopt {i}", trigger="error", enqueued_at=now, next_attempt_at=now)
        for i in range(3)
    ]
    assert reconcile.adopt_records(records[:1]) == 1  # straight COPY
    Job.objects.filter(pk=records[0].id).update(task="inserted by the producer")
    assert reconcile.adopt_records(records) == 2  # the COPY meets the row: the scratch-table path keeps it
    assert Job.objects.get(pk=records[0].id).task == "inserted by the producer"
    assert sorted(Job.objects.filter(task__startswith="adopt ").values_list("task", flat=True)) == [
        "adopt 1",
        "adopt 2",
    ]


def _written(job_id: str, when: Any, **fields: Any) -> WalJob:
    values: dict[str, Any] = dict(
        id=job_id, task=f"task {job_id}", trigger="error", enqueued_at=when, next_attempt_at=when
    )
    values.update(fields)
    record = WalJob(**values)
    (wal().dir / f"{record.id}.wal").write_bytes(frame(record.payload()))  # no fsync: set-up only
    return record


def test_a_replay_adopts_records_chunk_by_chunk_as_the_scan_reads_them(
    queue_dir: Path, fake_openai: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconcile, "ADOPT_BATCH", 4)  # 23 records: six chunks handed over by the scan thread
    copies: list[int] = []
    adopt = reconcile.adopt_records

    def counted(records: list[WalJob], **kw: Any) -> int:
        copies.append(len(records))
        return adopt(records, **kw)

    monkeypatch.setattr(reconcile, "adopt_records", counted)
    now = gojson.local(timezone.now())
    records = [_written(f"{i:016x}", now) for i in range(1, 21)]
    with_rows = [accepted(f"has a row {i}") for i in range(3)]
    (wal().dir / "not-a-job-id.wal").write_bytes(
        frame(records[0].payload().replace(b"0000000000000001", b"not-a-job-id"))
    )
    report = reconcile.replay()
    assert set(Job.objects.values_list("pk", flat=True)) == {r.id for r in records} | set(with_rows)
    assert report.adopted == 20 and report.quarantined == 1
    assert sum(copies) == 20 and len(copies) >= 5  # adopted in several COPYs, none of the rows twice
    assert (queue_dir / "quarantine" / "wal-not-a-job-id.wal").exists()


def test_a_database_outage_while_adopting_stops_the_pass_and_its_scan_thread(
    queue_dir: Path, fake_openai: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import OperationalError

    monkeypatch.setattr(reconcile, "ADOPT_BATCH", 2)
    now = gojson.local(timezone.now())
    records = [_written(f"{i:016x}", now) for i in range(1, 11)]
    adopt = reconcile._adopt

    def down(*args: Any) -> None:
        raise OperationalError("the server closed the connection")

    monkeypatch.setattr(reconcile, "_adopt", down)
    with pytest.raises(OperationalError):
        reconcile.replay()
    assert not [t for t in threading.enumerate() if t.name == "lessonq-wal-scan"]
    assert not Job.objects.exists() and all(wal().exists(r.id) for r in records)  # nothing lost, nothing quarantined
    monkeypatch.setattr(reconcile, "_adopt", adopt)
    assert reconcile.replay().adopted == 10


def test_a_sweep_leaves_waiting_rows_as_they_are_and_a_replay_pulls_their_retries_in(
    queue_dir: Path, fake_openai: Any
) -> None:
    later = timezone.now() + timedelta(hours=1)
    job_ids = [accepted(f"waiting {i}") for i in range(3)]
    Job.objects.filter(pk__in=job_ids).update(state=JobState.RETRY_WAIT, next_attempt_at=later, dispatched_at=None)
    report = reconcile.sweep()
    assert (report.adopted, report.repaired) == (0, 0)
    assert set(Job.objects.filter(pk__in=job_ids).values_list("next_attempt_at", flat=True)) == {later}
    reconcile.replay()
    assert all(
        t <= timezone.now() for t in Job.objects.filter(pk__in=job_ids).values_list("next_attempt_at", flat=True)
    )


@pytest.mark.django_db(transaction=True)
def test_a_waiting_row_another_step_holds_locked_is_skipped(queue_dir: Path, fake_openai: Any) -> None:
    later = timezone.now() + timedelta(hours=1)
    held, free = accepted("held"), accepted("free")
    Job.objects.filter(pk__in=[held, free]).update(state=JobState.RETRY_WAIT, next_attempt_at=later)
    with job_row_locked(held):
        report = reconcile.replay()
    assert report.skipped_locked == 1
    assert Job.objects.get(pk=held).next_attempt_at == later  # left to the next pass
    assert Job.objects.get(pk=free).next_attempt_at <= timezone.now()
