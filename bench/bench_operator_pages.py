"""Overview (charts and dependency states, caches cold) and Inbox server time with 100,000 jobs spread over
7 days (80% succeeded, 20% dead, 1.5 attempts each on average) — p50/p95 of the full Django request through
the test client — against an anchor measured in the same run: the queue's dead tab, first page (its own
benchmark is bench_triage_pages.py). Rows are made with bulk_create, not through the WAL.

    .venv/bin/python bench/bench_operator_pages.py [N_JOBS] [REPEAT]
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from datetime import timedelta

import bench_env
from bench_env import percentile

bench_env.setup("operator", LESSONBOARD_ALLOWED_HOSTS="testserver,localhost")

from django.core.cache import cache  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from lessonq.models import Job, JobAttempt  # noqa: E402
from tests.factories import UserFactory  # noqa: E402

ERRORS = [
    "permanent: quota exceeded for org-{n}",
    "transient: Error code: 503 - upstream down {n}",
    'permanent: lesson parse error: missing <correction> in "reply {n}"',
    "lessonq: job timed out after {n}s (attempt 5 of 5)",
]


def build(n_jobs: int) -> None:
    if Job.objects.filter(node="lessonq.bench-ops").count() == n_jobs:
        print(f"reusing {n_jobs} rows")
        return
    Job.objects.filter(node="lessonq.bench-ops").delete()
    rng = random.Random(7)
    now = timezone.now()
    t0 = time.perf_counter()
    jobs: list[Job] = []
    attempts: list[JobAttempt] = []
    for i in range(n_jobs):
        dead = i % 5 == 0
        when = now - timedelta(minutes=rng.randrange(7 * 24 * 60))
        k = rng.randrange(200)
        job = Job(
            id=uuid.uuid4().hex[:16],
            node="lessonq.bench-ops",
            state="dead" if dead else "succeeded",
            task=f"bench task {i}",
            trigger=rng.choice(["error", "hallucination"]),
            attempts=rng.randrange(1, 3),
            enqueued_at=when,
            next_attempt_at=when,
            finished_at=when + timedelta(seconds=rng.randrange(5, 600)),
            last_error=rng.choice(ERRORS).format(n=k) if dead else "",
        )
        jobs.append(job)
        for number in range(1, job.attempts + 1):
            attempts.append(JobAttempt(job=job, number=number, started_at=when + timedelta(seconds=number)))
        if len(jobs) == 5000:
            Job.objects.bulk_create(jobs)
            JobAttempt.objects.bulk_create(attempts)
            jobs.clear()
            attempts.clear()
    Job.objects.bulk_create(jobs)
    JobAttempt.objects.bulk_create(attempts)
    with connection.cursor() as cur:
        cur.execute("ANALYZE queue_job")
        cur.execute("ANALYZE queue_jobattempt")
    print(f"built {n_jobs} jobs in {time.perf_counter() - t0:.1f} s")


def measure(client: Client, label: str, path: str, repeat: int, *, cold: bool) -> float:
    times: list[float] = []
    for _ in range(repeat):
        if cold:
            cache.clear()
        t0 = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200, response.status_code
    p50, p95 = percentile(times, 50), percentile(times, 95)
    print(f"{label:<48} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms")
    return p50


def main() -> None:
    n_jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    build(n_jobs)
    client = Client()
    client.force_login(UserFactory(username="bench-operator", role="operator"))
    client.get("/queue/?tab=dead")  # warm-up (connection, templates)
    print(f"{Job.objects.count()} jobs, {JobAttempt.objects.count()} attempts; repeat {repeat}")
    anchor = measure(client, "anchor: dead tab, first page (caches cold)", "/queue/?tab=dead", repeat, cold=True)
    rows = [
        ("overview, 24 h charts (caches cold)", "/", True),
        ("overview, 7 d charts (caches cold)", "/?window=7d", True),
        ("overview, 24 h charts (caches warm)", "/", False),
        ("charts fragment, 7 d (caches cold)", "/overview/charts?window=7d", True),
        ("inbox (caches cold)", "/inbox/", True),
    ]
    for label, path, cold in rows:
        p50 = measure(client, label, path, repeat, cold=cold)
        print(f"{'':<48} ratio to the anchor: {p50 / anchor:5.2f}")


if __name__ == "__main__":
    main()
