"""The gap refresh's cost (``lessons.usage.gaps.refresh``, beat's ``refresh_derived``): ``--gaps`` distinct
open gaps over ``--lessons`` synthetic lessons in one workspace (bench/synthetic.py: random vectors, the
worst case for an HNSW graph), on the embedded PostgreSQL of ``var/test``, database
``lessonboard_bench_gaps``. Prints the time of a cold refresh (every gap's nearest lesson searched, as after
the first refresh, or the hourly full pass) and of a refresh after one lesson changed (the changed lessons
compared with every gap, only the gaps whose nearest lesson changed searched again), beside the anchor
measured in the same run: the same number of raw top-1 HNSW searches, one SQL statement each, with the
retrieve path's ``hnsw.ef_search``.

    .venv/bin/python bench/bench_gap_refresh.py [--lessons 100000] [--gaps 1000] [--rounds 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

parser = argparse.ArgumentParser()
parser.add_argument("--lessons", type=int, default=100_000)
parser.add_argument("--gaps", type=int, default=1000)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--profile", action="store_true", help="print the top of a cProfile of one refresh")
args = parser.parse_args()

import bench_env  # noqa: E402

bench_env.setup("gaps")

from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from synthetic import seed_gaps, seed_lessons  # noqa: E402

from lessonboard.models import DerivedState  # noqa: E402
from lessons.models import Lesson  # noqa: E402
from lessons.usage import gaps  # noqa: E402
from lessons.usage.models import Retrieval  # noqa: E402


def raw_searches(vectors: list[str], workspace_id: int) -> float:
    """The anchor: one top-1 HNSW search per vector, one statement each; seconds."""
    t0 = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(settings.RETRIEVAL_EF_SEARCH)])
        for vector in vectors:
            cur.execute(
                "SELECT id FROM lessons_lesson WHERE workspace_id = %s ORDER BY embedding <=> %s::vector LIMIT 1",
                [workspace_id, vector],
            )
            cur.fetchone()
    return time.perf_counter() - t0


def cold_refresh() -> float:
    DerivedState.objects.filter(pk=gaps.SNAPSHOT).delete()  # no kept nearest lessons: every gap is searched
    t0 = time.perf_counter()
    gaps.refresh(force=True)
    return time.perf_counter() - t0


def after_a_change(lesson_id: int) -> float:
    """A refresh after one lesson was edited (its ``updated_at`` moved), the last refresh's row kept."""
    with connection.cursor() as cur:
        cur.execute("UPDATE lessons_lesson SET updated_at = now() WHERE id = %s", [lesson_id])
    t0 = time.perf_counter()
    gaps.refresh()
    return time.perf_counter() - t0


def main() -> None:
    big, _ = seed_lessons(args.lessons)
    with connection.cursor() as cur:  # seeded lessons are old ones: not "changed lately" (gaps.CHANGE_LAG)
        cur.execute(
            "UPDATE lessons_lesson SET updated_at = now() - interval '1 day' WHERE updated_at > now() - interval '1 hour'"
        )
    seed_gaps(args.gaps)
    some = list(Lesson.objects.filter(workspace=big).values_list("id", flat=True)[: args.rounds])
    vectors = [
        "[" + ",".join(f"{x:.6f}" for x in v) + "]" for v in Retrieval.objects.values_list("embedding", flat=True)
    ]
    raw_searches(vectors[:50], big.pk)  # warm the index pages
    anchors, refreshes, changes = [], [], []
    for round_ in range(args.rounds):
        anchors.append(raw_searches(vectors, big.pk))
        refreshes.append(cold_refresh())
        changes.append(after_a_change(some[round_]))
    groups = len(DerivedState.read(gaps.SNAPSHOT)["groups"])
    anchor, refresh, change = statistics.median(anchors), statistics.median(refreshes), statistics.median(changes)
    print(f"{args.lessons:,} lessons, {args.gaps:,} open gaps ({groups:,} groups), median of {args.rounds} rounds")
    print(
        f"  anchor: {args.gaps:,} raw top-1 HNSW searches  {anchor * 1000:8.0f} ms  ({anchor / args.gaps * 1000:.1f} ms each)"
    )
    print(f"  cold gap refresh (a full pass)       {refresh * 1000:8.0f} ms  = {refresh / anchor:.3f}x the anchor")
    print(f"  refresh after one lesson changed     {change * 1000:8.0f} ms  = {change / anchor:.3f}x the anchor")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        cold_refresh()
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
