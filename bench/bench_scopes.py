"""What the shared tier costs a retrieve: ``retrieval.search`` in one workspace with its shared lessons
(``scope="all"``, what an agent's retrieve does) against the same workspace alone (``scope=""``, the filter
before the shared tier: the anchor, measured in the same run, query by query, in alternating order).

    .venv/bin/python bench/bench_scopes.py [--lessons 50000] [--workspaces 20] [--shared 0.005] [--queries 100]

Synthetic lesson-like text (as bench_retrieval_scale.py) over ``--workspaces`` workspaces, a ``--shared``
share of them in the shared tier; lexical retrieval (no embedding provider: the full-text branch is where the
workspace-first index matters). Prints p50/p95 per scope and the ratio to the anchor.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import UTC, datetime

import bench_lessons_db

bench_lessons_db.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from lessonboard.models import Workspace  # noqa: E402
from lessons import retrieval  # noqa: E402

TOPICS = (
    "edit large file patch rewrite timeout retry backoff rate limit 429 migration column index lock "
    "git rebase conflict markers dependency pin version flaky test sleep poll path relative workspace "
    "docker cache build deploy secret token encoding csv json yaml parser worker queue celery postgres"
).split()
SCOPES = ("", "all", "workspace", "shared")


def text(rnd: random.Random, words: int) -> str:
    return " ".join(
        rnd.choice(TOPICS) if rnd.random() < 0.15 else f"w{int(rnd.paretovariate(1.1)) % 20000}" for _ in range(words)
    )


def load(n: int, workspaces: list[int], shared: float, rnd: random.Random) -> float:
    bench_lessons_db.empty_lessons()
    columns = (
        "situation, mistake, correction, tags, trigger, content, fact_id, category, confidence, provenance, "
        "access_count, last_accessed, score, agent, status, created_at, updated_at, chatcli_extra, lang, "
        "occurrences, workspace_id, scope, embedding_model"
    )
    types = ["text", "text", "text", "varchar[]", "varchar", "text", "varchar", "varchar", "float8", "varchar"]
    types += ["int4", "timestamptz", "float8", "varchar", "varchar", "timestamptz", "timestamptz", "jsonb"]
    types += ["varchar", "int4", "int8", "varchar", "varchar"]
    stamp = datetime.now(UTC)
    start = time.perf_counter()
    raw = connection.connection
    with raw.cursor() as cur, cur.copy(f"COPY lessons_lesson ({columns}) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(types)
        for i in range(n):
            situation, mistake, correction = text(rnd, 8), text(rnd, 6), text(rnd, 10)
            content = f"LESSON: {situation}\nMISTAKE: {mistake}\nCORRECTION: {correction}\nTRIGGER: error"
            copy.write_row(
                (
                    situation,
                    mistake,
                    correction,
                    [rnd.choice(TOPICS), rnd.choice(TOPICS)],
                    "error",
                    content,
                    f"{i:024x}",
                    "lesson",
                    0.6,
                    "synthetic",
                    1,
                    stamp,
                    1.86,
                    "",
                    "active",
                    stamp,
                    stamp,
                    "{}",
                    "en",
                    1,
                    workspaces[i % len(workspaces)],
                    "shared" if rnd.random() < shared else "workspace",
                    "",
                )
            )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE lessons_lesson")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lessons", type=int, default=50_000)
    parser.add_argument("--workspaces", type=int, default=20)
    parser.add_argument("--shared", type=float, default=0.005, help="share of lessons in the shared tier")
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    settings.EMBEDDING_PROVIDER = "none"
    rnd = random.Random(7)
    Workspace.objects.filter(slug__startswith="bench-").delete()
    ids = [Workspace.objects.create(slug=f"bench-{w}", name=f"bench-{w}").pk for w in range(args.workspaces)]
    seconds = load(args.lessons, ids, args.shared, rnd)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM lessons_lesson WHERE scope = 'shared'")
        shared = cursor.fetchone()[0]
    print(f"{args.lessons:,} lessons in {args.workspaces} workspaces, {shared:,} shared; COPY {seconds:.1f}s")
    retrieval.reset_term_stats()
    times: dict[str, list[float]] = {scope: [] for scope in SCOPES}
    found: dict[str, int] = dict.fromkeys(SCOPES, 0)
    for q in range(args.queries + 5):
        task = text(rnd, 12)
        slug = f"bench-{q % args.workspaces}"
        order = SCOPES if q % 2 else tuple(reversed(SCOPES))
        for scope in order:
            filters = retrieval.Filters(workspace=slug, scope=scope)
            start = time.perf_counter()
            hits = retrieval.search(task, k=5, filters=filters).hits
            elapsed = time.perf_counter() - start
            if q >= 5:  # the first five warm the caches and the term statistics
                times[scope].append(elapsed * 1000)
                found[scope] += len(hits)

    def p(values: list[float], share: float) -> float:
        return statistics.quantiles(values, n=100)[int(share * 100) - 1]

    anchor, anchor95 = statistics.median(times[""]), p(times[""], 0.95)
    print("scope                       p50 ms   p95 ms   p50 / anchor   p95 / anchor   hits")
    for scope in SCOPES:
        label = scope or "(anchor) workspace alone"
        values = times[scope]
        p50, p95 = statistics.median(values), p(values, 0.95)
        print(f"{label:<26}{p50:8.1f} {p95:8.1f}   {p50 / anchor:10.2f}x  {p95 / anchor95:12.2f}x  {found[scope]:>5}")


if __name__ == "__main__":
    main()
