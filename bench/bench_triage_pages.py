"""Dead-tab page server time with 100,000 dead jobs (rows made with bulk_create, not through the WAL):
first page, a deep page (keyset cursor 90,000 rows in), filtered searches, sorted by attempts, the
error-groups page and the live-counts fragment — p50/p95 of the full Django request (view, queries,
template) through the test client, counts cache warm as in normal polling and cold.

    .venv/bin/python bench/bench_triage_pages.py [N_DEAD] [REPEAT]
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from datetime import timedelta

import bench_triage_env
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.utils import timezone

from lessonboard.models import Workspace
from lessonq.models import Job
from lessonq.triage import queries as triage
from tests.factories import UserFactory

ERRORS = [
    "transient: Error code: 503 - {{'error': {{'message': 'upstream down {n}'}}}}",
    'permanent: lesson parse error: missing <correction> in "reply {n}"',
    "lessonq: job timed out after {n}s (attempt 5 of 5)",
    "open /var/lib/lessonboard/ws{n}/go.mod: no such file or directory",
    "request {u} failed at 2026-11-29T10:{m:02d}:00Z: connection reset by 10.0.0.{m}:5432",
    "permanent: quota exceeded for org-{n} ({n} tokens)",
    "transient: Error code: 429 - rate limited, retry after {n} ms",
    "PermanentLLMError: model 'gpt-{m}' not found",
]


def build(n_dead: int) -> None:
    have = Job.objects.filter(node="lessonq.bench-rows").count()
    if have == n_dead + n_dead // 5:
        print(f"reusing {have} rows")
        return
    Job.objects.filter(node="lessonq.bench-rows").delete()
    rng = random.Random(5)
    workspaces = [Workspace.objects.for_slug(f"bench-ws-{i}") for i in range(20)]
    now = timezone.now()
    t0 = time.perf_counter()
    batch: list[Job] = []
    total = n_dead + n_dead // 5
    for i in range(total):
        dead = i < n_dead
        # 2,000 distinct timestamps for 120,000 rows: many ties, as a burst of failures leaves them
        when = now - timedelta(minutes=rng.randrange(2000))
        k = rng.randrange(1000)
        batch.append(
            Job(
                id=uuid.uuid4().hex[:16],
                node="lessonq.bench-rows",
                state="dead" if dead else "succeeded",
                task=f"bench task {i}: refactor module {k} of service {rng.randrange(50)}",
                output="agent output " * 20,
                outcome="ERROR: failed",
                trigger=rng.choice(["error", "error", "hallucination", "low_quality"]),
                agent=rng.choice(["codex", "claude", "aider", "deployer"]),
                workspace=rng.choice(workspaces),
                attempts=rng.randrange(1, 6),
                enqueued_at=when,
                next_attempt_at=when,
                finished_at=when + timedelta(seconds=30),
                last_error=rng.choice(ERRORS).format(n=k, m=k % 60, u=uuid.UUID(int=rng.getrandbits(128)))
                if dead
                else "",
            )
        )
        if len(batch) == 5000:
            Job.objects.bulk_create(batch)
            batch.clear()
    Job.objects.bulk_create(batch)
    with connection.cursor() as cur:
        cur.execute("ANALYZE queue_job")
    print(f"built {total} rows ({n_dead} dead) in {time.perf_counter() - t0:.1f} s")


def measure(
    client: Client, label: str, path: str, params: dict[str, str], repeat: int, cold: bool = False, htmx: bool = False
) -> None:
    times: list[float] = []
    rows = 0
    for _ in range(repeat):
        if cold:
            cache.delete_many([triage.COUNTS_KEY, triage.GROUPS_KEY])
        t0 = time.perf_counter()
        response = client.get(path, params, headers={"HX-Request": "true"} if htmx else {})
        times.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200, response.status_code
        rows = response.content.decode().count("data-job=")
    p50, p95 = bench_triage_env.percentile(times, 50), bench_triage_env.percentile(times, 95)
    print(f"{label:<44} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   ({rows} rows)")


def main() -> None:
    n_dead = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    build(n_dead)
    client = Client()
    client.force_login(UserFactory(username="bench-operator", role="operator"))
    dead = triage.JobFilter(tab="dead").apply()
    deep_row = dead.order_by("-enqueued_at", "-id")[int(n_dead * 0.9)]
    deep = triage._encode([deep_row.enqueued_at, deep_row.id])
    a_task = Job.objects.dead().order_by("-id").values_list("task", flat=True)[0]
    print(f"{Job.objects.count()} jobs, {Job.objects.dead().count()} dead; repeat {repeat}")
    client.get("/queue/", {"tab": "dead"})  # warm-up (connection, templates)
    measure(client, "dead tab, first page", "/queue/", {"tab": "dead"}, repeat)
    measure(client, "dead tab, first page, counts cache cold", "/queue/", {"tab": "dead"}, repeat, cold=True)
    measure(client, "dead tab, deep page (90% in, keyset)", "/queue/", {"tab": "dead", "after": deep}, repeat)
    measure(client, "dead tab, sorted by attempts", "/queue/", {"tab": "dead", "sort": "attempts"}, repeat)
    measure(client, "search 'quota' (~12% of rows)", "/queue/", {"tab": "dead", "q": "quota"}, repeat)
    measure(
        client, "search a rare task text (1 row)", "/queue/", {"tab": "dead", "q": a_task.split(":")[0] + ":"}, repeat
    )
    measure(
        client,
        "filter agent + trigger + 24h",
        "/queue/",
        {"tab": "dead", "agent": "codex", "trigger": "error", "newer": "24h"},
        repeat,
    )
    measure(client, "htmx results fragment (next page)", "/queue/", {"tab": "dead", "after": deep}, repeat, htmx=True)
    measure(client, "live counts fragment (cache cold)", "/queue/counts", {}, repeat, cold=True)
    measure(client, "error groups page (cache cold)", "/queue/groups/", {}, max(5, repeat // 3), cold=True)
    walk(dead)


def walk(dead: object) -> None:
    """Correctness at scale: every dead row exactly once across keyset pages (2,000 distinct timestamps
    for 100,000 rows: ties everywhere), for each sort."""
    expected = set(Job.objects.dead().values_list("id", flat=True))
    for sort in triage.ORDERINGS:
        seen: list[str] = []
        cursor = None
        t0 = time.perf_counter()
        pages = 0
        while True:
            page = triage.keyset(triage.JobFilter(tab="dead", sort=sort).apply(), sort=sort, cursor=cursor, size=500)
            seen.extend(j.id for j in page.rows)
            pages += 1
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        elapsed = time.perf_counter() - t0
        ok = len(seen) == len(expected) and set(seen) == expected
        print(
            f"keyset walk, sort {sort:<9} {pages} pages of 500: {'every row exactly once' if ok else 'MISMATCH'} ({elapsed:.1f} s)"
        )


if __name__ == "__main__":
    main()
