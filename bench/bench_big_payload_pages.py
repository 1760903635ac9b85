"""Queue pages over big jobs, through a real gunicorn: Done and Dead tab p50/p95 with 50 jobs of 14 MiB
each (4 MiB task + 10 MiB agent output), and the peak RSS of the web workers; the anchor is the same pages
over 50 small jobs, same run, same server. Also the job page of one 14 MiB job.

    .venv/bin/python bench/bench_big_payload_pages.py [REQUESTS_PER_PAGE]

Bars (docs/operations.md): Done/Dead tab p95 <= 200 ms and web worker peak RSS <= 300 MB.
"""

from __future__ import annotations

import http.client
import random
import string
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import bench_env

bench_env.setup("bigpages", fresh_db=True)

from django.conf import settings  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from lessonq.models import Job  # noqa: E402
from tests.factories import UserFactory  # noqa: E402
from tests.support.processes import Gunicorn  # noqa: E402

MIB = 1 << 20
JOBS = 50
TASK_BYTES, OUTPUT_BYTES = 4 * MIB, 10 * MIB


def text(rng: random.Random, size: int) -> str:
    """``size`` characters of word-like text (not one repeated line: compressible, but not trivially)."""
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randrange(3, 9))) for _ in range(4000)]
    out: list[str] = []
    n = 0
    while n < size:
        line = " ".join(rng.choices(words, k=12)) + "\n"
        out.append(line)
        n += len(line)
    return "".join(out)[:size]


def build(rng: random.Random) -> None:
    now = timezone.now()
    big_task, big_output = text(rng, TASK_BYTES), text(rng, OUTPUT_BYTES)
    t0 = time.perf_counter()
    for state in ("dead", "succeeded"):
        for agent, task, output in (("big", big_task, big_output), ("small", "small task", "small output")):
            batch = []
            for i in range(JOBS):
                when = now - timedelta(minutes=i + 1)
                batch.append(
                    Job(
                        id=uuid.uuid4().hex[:16],
                        node="lessonq.bench-big",
                        state=state,
                        # a distinct head per job, the same bulk (one 14 MiB string in memory here)
                        task=f"{agent} job {i}: {task}",
                        output=output,
                        outcome="ERROR: failed",
                        trigger="error",
                        agent=agent,
                        attempts=5 if state == "dead" else 1,
                        enqueued_at=when,
                        next_attempt_at=when,
                        finished_at=now - timedelta(seconds=i),
                        last_error=f"permanent: lesson parse error in reply {i}" if state == "dead" else "",
                    )
                )
                if len(batch) == 5:
                    Job.objects.bulk_create(batch)
                    batch.clear()
            Job.objects.bulk_create(batch)
    print(
        f"built {4 * JOBS} jobs ({2 * JOBS} of {(TASK_BYTES + OUTPUT_BYTES) / MIB:.0f} MiB) in {time.perf_counter() - t0:.1f}s"
    )


def peak_rss_mb(server: Gunicorn) -> dict[int, float]:
    """Peak resident set (VmHWM) of each gunicorn worker, in MB."""
    out: dict[int, float] = {}
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
    for pid in children:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                out[int(pid)] = int(line.split()[1]) / 1024
    return out


def timed_get(port: int, path: str, cookie: str) -> tuple[float, int, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.perf_counter()
    conn.request("GET", path, headers={"Cookie": cookie})
    response = conn.getresponse()
    body = response.read()
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed, response.status, len(body)


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    rng = random.Random(14)
    build(rng)
    user = UserFactory(username=f"bench-{uuid.uuid4().hex[:6]}", role="operator")
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    big_job = Job.objects.filter(agent="big", state="dead").values_list("pk", flat=True).first()
    server = Gunicorn(env=bench_env.env(), workers=2).wait_ready()
    try:
        pages = {
            f"{kind} {tab}": f"/queue/?tab={tab}&agent={kind}" for tab in ("done", "dead") for kind in ("small", "big")
        }
        pages["big job page"] = f"/queue/jobs/{big_job}/"
        results: dict[str, tuple[float, float, int]] = {}
        for name, path in pages.items():
            timed_get(server.port, path, cookie)  # warm-up (both workers get their turn below)
            times = []
            size = 0
            for _ in range(repeat):
                elapsed, status, size = timed_get(server.port, path, cookie)
                assert status == 200, (name, status)
                times.append(elapsed * 1000)
            results[name] = (bench_env.percentile(times, 50), bench_env.percentile(times, 95), size)
        rss = peak_rss_mb(server)
    finally:
        server.stop()
    print(f"{'page':<18} {'p50 ms':>8} {'p95 ms':>8} {'bytes':>9}")
    for name, (p50, p95, size) in results.items():
        print(f"{name:<18} {p50:8.1f} {p95:8.1f} {size:9d}")
    for tab in ("done", "dead"):
        big, small = results[f"big {tab}"][1], results[f"small {tab}"][1]
        print(
            f"{tab} tab p95: {big:.1f} ms with 50 x 14 MiB jobs vs {small:.1f} ms with 50 small (anchor): ratio {big / small:.2f}"
        )
    print("web worker peak RSS (VmHWM): " + ", ".join(f"pid {pid} {mb:.0f} MB" for pid, mb in sorted(rss.items())))
    ok = all(results[f"big {t}"][1] <= 200 for t in ("done", "dead")) and max(rss.values()) <= 300
    print("bars (p95 <= 200 ms, RSS <= 300 MB):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
