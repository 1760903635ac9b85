"""Bulk retry of 10,000 dead jobs end to end: the preview (count + eligibility) and the confirm step
(freezing the ids) as the web process does them, then the background run through a real Celery worker
(per chunk of 100: WAL records written with an fsync each and one directory fsync, one UPDATE back to
pending, dispatch within capacity, DLQ records removed, one audit row). Anchor, same run: the disk
floor, writing the same number of records the same way (fsync each, one directory fsync per 100)
into a scratch directory.

    .venv/bin/python bench/bench_triage_bulk.py [N]
"""

from __future__ import annotations

import shutil
import sys
import time
import uuid
from datetime import timedelta

import bench_triage_env
from django.conf import settings
from django.utils import timezone

from lessonq import bulk
from lessonq.models import Job
from lessonq.paths import dlq, wal
from lessonq.triage import queries as triage
from lessonq.triage.models import BulkAction, BulkItem
from lessonq.wal import Wal, WalJob
from tests.support.processes import CeleryWorker
from tests.support.wait import wait_for

QUEUE = "triage-bench"


def build(n: int) -> None:
    Job.objects.filter(node=settings.LESSONQ_QUEUE).delete()
    now = timezone.now()
    rows = [
        Job(
            id=uuid.uuid4().hex[:16],
            node=settings.LESSONQ_QUEUE,
            state="dead",
            task=f"bulk bench task {i}",
            output="o",
            outcome="ERROR: x",
            trigger="error",
            agent="bulk-bench",
            attempts=5,
            enqueued_at=now - timedelta(seconds=i),
            next_attempt_at=now,
            finished_at=now,
            last_error=f"transient: Error code: 503 (try {i})",
        )
        for i in range(n)
    ]
    Job.objects.bulk_create(rows, batch_size=5000)
    t0 = time.perf_counter()
    for job in rows:
        dlq().append(job.wal_job())
    print(f"{n} dead jobs with DLQ records (record writes: {n / (time.perf_counter() - t0):.0f}/s)")


def disk_floor(n: int) -> float:
    """Seconds to write ``n`` WAL records with an fsync each and one directory fsync per 100."""
    scratch = Wal(dlq().dir.parent / "bench-floor", quarantine_dir=dlq().dir.parent / "bench-floor-q")
    now = timezone.now()
    records = [WalJob(id=f"{i:016x}", task=f"floor {i}", trigger="error", enqueued_at=now) for i in range(n)]
    t0 = time.perf_counter()
    for start in range(0, n, 100):
        scratch.append_many(records[start : start + 100])
    elapsed = time.perf_counter() - t0
    shutil.rmtree(scratch.dir)
    shutil.rmtree(scratch.quarantine_dir, ignore_errors=True)
    return elapsed


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    settings.LESSONQ_BULK_QUEUE = QUEUE
    settings.LESSONQ_BULK_CAP = max(n, settings.LESSONQ_BULK_CAP)
    build(n)
    worker = CeleryWorker(
        queues=[QUEUE], hostname="triage-bench@%h", env=bench_triage_env.env(LESSONQ_BULK_CAP=str(n))
    ).wait_ready()
    try:
        flt = triage.JobFilter(tab="dead", agent="bulk-bench")
        t0 = time.perf_counter()
        preview = triage.preview("retry", flt.apply(), scope="filter")
        t_preview = time.perf_counter() - t0
        t0 = time.perf_counter()
        action = bulk.start("retry", preview.run_ids, scope="filter", filter=flt.as_dict(), matched=preview.matched)
        t_start = time.perf_counter() - t0
        t0 = time.perf_counter()
        done = wait_for(
            lambda: BulkAction.objects.filter(pk=action.pk, state__in=["done", "failed", "cancelled"]).first(),
            timeout=3600,
            interval=0.2,
            what="bulk done",
        )
        t_run = time.perf_counter() - t0
    finally:
        worker.stop()
    ok = BulkItem.objects.filter(bulk_id=action.pk, outcome="done").count()
    print(f"preview of {preview.matched} matching jobs (count + eligibility + capped ids): {t_preview * 1000:.0f} ms")
    print(f"confirm (freeze {len(preview.run_ids)} ids into items): {t_start * 1000:.0f} ms")
    print(
        f"background run: {done.state}, {ok}/{n} retried in {t_run:.1f} s = {n / t_run:.0f} jobs/s "
        f"(1 worker process; WAL records now {wal().count()}, DLQ records {dlq().count()})"
    )
    floor = disk_floor(n)
    print(f"anchor: {n} records written with fsync each + a directory fsync per 100: {floor:.1f} s")
    print(f"ratio bulk retry / disk floor: {t_run / floor:.1f}")
    Job.objects.filter(node=settings.LESSONQ_QUEUE).delete()
    for name in wal().names():
        wal().ack(name.removesuffix(".wal"))


if __name__ == "__main__":
    main()
