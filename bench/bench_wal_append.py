"""WAL append latency next to a raw write + fsync + rename + dir-fsync of the same bytes, in one run.

    .venv/bin/python bench/bench_wal_append.py [N]

Prints p50/p99 in milliseconds for: lessonq's ``Wal.append`` (encode + frame + tmp + fsync + link + dir fsync),
and the bare syscall sequence with the already-framed bytes. The difference is the price of encoding and
our no-overwrite ``link()``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lessonq.wal import Wal, WalJob, frame


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] * 1000


def raw_write(directory: Path, name: str, data: bytes) -> None:
    tmp = directory / f"{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, directory / name)
    dfd = os.open(directory, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent.parent / "var") as tmp:
        base = Path(tmp)
        wal = Wal(base / "wal", quarantine_dir=base / "quarantine")
        raw_dir = base / "raw"
        raw_dir.mkdir()
        now = datetime.now(UTC).astimezone()
        output = "agent output line\n" * 50  # ~900 bytes, a typical small record
        wal_times: list[float] = []
        raw_times: list[float] = []
        for i in range(n):
            job = WalJob(
                id=f"{i:016x}",
                task=f"task {i}",
                attempt=output,
                outcome="ERROR: x",
                trigger="error",
                enqueued_at=now,
                next_attempt_at=now,
            )
            data = frame(job.payload())
            # Interleave the two so both see the same disk state.
            t0 = time.perf_counter()
            wal.append(job)
            t1 = time.perf_counter()
            raw_write(raw_dir, f"{i:016x}.wal", data)
            t2 = time.perf_counter()
            wal_times.append(t1 - t0)
            raw_times.append(t2 - t1)
        size = len(data)
    print(f"records: {n} of {size} bytes, filesystem under {base.parent}")
    print(
        f"WAL append          p50 {pct(wal_times, 0.5):7.3f} ms   p99 {pct(wal_times, 0.99):7.3f} ms   mean {statistics.mean(wal_times) * 1000:7.3f} ms"
    )
    print(
        f"raw write+fsync+rename+dirfsync p50 {pct(raw_times, 0.5):7.3f} ms   p99 {pct(raw_times, 0.99):7.3f} ms   mean {statistics.mean(raw_times) * 1000:7.3f} ms"
    )


if __name__ == "__main__":
    main()
