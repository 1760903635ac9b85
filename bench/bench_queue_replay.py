"""Replay of many WAL records (default 100,000): records/s of a full replay (scan, adopt as rows in bulk,
dispatch up to capacity) next to its anchor, the WAL scan alone (read + CRC + JSON) in the same run.

    .venv/bin/python bench/bench_queue_replay.py [N]

Records are written without fsync for the set-up (only the replay is measured).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime

import bench_queue_env
from django.conf import settings

from lessonq import reconcile
from lessonq.models import Job
from lessonq.paths import wal
from lessonq.wal import WalJob, frame
from tests.support.processes import purge_broker


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    bench_queue_env.reset_queue()
    settings.LLM_BASE_URL, settings.LLM_MODEL = "http://127.0.0.1:9/v1", "bench"  # dispatch path, no calls
    directory = wal().dir
    now = datetime.now(UTC).astimezone()
    t0 = time.perf_counter()
    for i in range(n):
        job = WalJob(
            id=f"{i:016x}",
            task=f"task {i}",
            attempt="agent output " * 20,
            outcome="ERROR: x",
            trigger="error",
            enqueued_at=now,
            next_attempt_at=now,
        )
        (directory / f"{job.id}.wal").write_bytes(frame(job.payload()))
    os.sync()  # the set-up's writeback is not the replay's work: flush it before anything is timed
    print(f"set-up: {n} records written in {time.perf_counter() - t0:.1f}s (load average {os.getloadavg()[0]:.1f})")
    t0 = time.perf_counter()
    listing = wal().list()
    scan = time.perf_counter() - t0
    print(
        f"WAL scan (read + CRC + JSON) : {len(listing.jobs)} records in {scan:.2f}s = {len(listing.jobs) / scan:,.0f} records/s"
    )
    t0 = time.perf_counter()
    report = reconcile.replay()
    full = time.perf_counter() - t0
    print(f"full replay (adopt + dispatch): {n} records in {full:.2f}s = {n / full:,.0f} records/s  {report.as_dict()}")
    print(
        f"ratio replay / scan alone: {scan / full:.2f}; published {report.dispatched} messages "
        f"(capacity {settings.LESSONQ_CAPACITY}; the rest wait undispatched for room)"
    )
    assert Job.objects.count() == n
    assert report.dispatched <= settings.LESSONQ_CAPACITY
    t0 = time.perf_counter()
    report = reconcile.replay()
    again = time.perf_counter() - t0
    print(f"second replay (rows exist)   : {n} records in {again:.2f}s = {n / again:,.0f} records/s")
    bench_queue_env.reset_queue()
    purge_broker()
    for path in directory.glob("*.wal"):
        path.unlink()


if __name__ == "__main__":
    main()
