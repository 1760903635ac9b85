"""Figures for gated memory writes: the review pass, the store's planning, approvals, the queue page.

    .venv/bin/python bench/review_bench.py [--proposals 400]

Runs against its own embedded PostgreSQL database (``var/bench``) unless DATABASE_URL is set. Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["LESSONBOARD_ENV_FILE"] = ""
os.environ.setdefault("LESSONBOARD_DATA_DIR", str(ROOT / "var" / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lessonboard.settings")
if not os.environ.get("DATABASE_URL"):
    from lessonboard import embedded

    pgdata = Path(os.environ["LESSONBOARD_DATA_DIR"]) / "pgdata"
    embedded.start(pgdata)
    embedded.ensure_database(pgdata, "lessonboard_bench_review")
    os.environ["DATABASE_URL"] = embedded.database_url(pgdata, "lessonboard_bench_review")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from lessonboard.models import Workspace  # noqa: E402
from lessons.review import decisions, memory  # noqa: E402
from lessons.review.learning import Verdict  # noqa: E402
from lessons.review.models import MemoryDocument, Proposal, ReviewRun  # noqa: E402
from lessons.review.staging import run_review  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--proposals", type=int, default=400)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    from lessonboard.roles import assign_role

    user, _ = get_user_model().objects.get_or_create(username="bench-reviewer")
    assign_role(user, "reviewer")
    Proposal.objects.all().delete()
    ReviewRun.objects.all().delete()
    MemoryDocument.objects.all().delete()
    ws = Workspace.objects.for_slug("bench")

    # 1. the pure planner on a full 2,200-char store
    entries = [f"fact number {i} about the build" for i in range(60)]  # 1,967 of 2,200 chars
    n = 20000
    t0 = time.perf_counter()
    for i in range(n):
        memory.plan(entries, "replace", old_text="number 17 ", content=f"fact {i}", limit=2200)
    print(f"plan(replace) on {len(entries)} entries: {n / (time.perf_counter() - t0):,.0f} ops/s")

    # 2. the pass with the score gate, 10 proposals per run, writes to the real store
    batch = 10
    runs = max(1, args.proposals // batch)
    t0 = time.perf_counter()
    for r in range(runs):
        raw = [
            {"target": "memory", "op": "add", "content": f"run {r} fact {i}", "score": 0.9 if i % 2 else 0.3}
            for i in range(batch)
        ]
        run_review(ws, "bench summary", agent="bench", proposer=lambda s, raw=raw: raw)
    elapsed = time.perf_counter() - t0
    print(f"review pass (score gate, store writes + rows): {runs * batch / elapsed:,.0f} proposals/s ({runs} runs)")

    # 3. staging for people, then approvals one by one
    def hold(p):
        return Verdict("hold", "bench", gate="human", auto_approve=True)

    for r in range(runs):
        raw = [{"target": "user", "op": "add", "content": f"u{r}.{i}", "score": 0.8} for i in range(batch)]
        run_review(ws, "bench", proposer=lambda s, raw=raw: raw, gate=hold)
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    timings = []
    for _ in range(5):
        t0 = time.perf_counter()
        response = client.get("/reviews/")
        timings.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200
    pending = Proposal.objects.pending().count()
    print(f"queue page with {pending} pending: median {statistics.median(timings):.1f} ms")
    ids = list(Proposal.objects.pending().values_list("pk", flat=True)[:100])
    t0 = time.perf_counter()
    client.get(f"/reviews/{ids[0]}/")
    print(f"proposal page (reserve + preview + nearest): {(time.perf_counter() - t0) * 1000:.1f} ms")
    lat = []
    for pk in ids:
        t0 = time.perf_counter()
        decisions.approve(pk, user)
        lat.append((time.perf_counter() - t0) * 1000)
    print(
        f"approve (lock, replay into store, audit): median {statistics.median(lat):.2f} ms, max {max(lat):.2f} ms over {len(lat)}"
    )
    print(f"user target after approvals: {memory.usage_text(memory.entries_of(ws, 'user'), memory.limit_for('user'))}")


if __name__ == "__main__":
    main()
