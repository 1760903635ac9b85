"""Synthetic rows for cost benchmarks, seeded in SQL: lessons with random vectors under the configured
model's id and texts of Zipf-distributed made-up words plus topic words, and distinct gaps (empty
retrievals with random task vectors). Fine for a cost bench, not for quality. Import after
``bench_env.setup``.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.db import connection, transaction

from lessonboard.models import Workspace
from lessons import embeddings
from lessons.models import Lesson
from lessons.usage.models import Retrieval

TOPICS = (
    "edit large file patch rewrite timeout retry backoff rate limit 429 migration column index lock git rebase "
    "conflict markers dependency pin version flaky test sleep poll path relative workspace docker cache build "
    "deploy secret token encoding csv json yaml parser worker queue celery postgres"
).split()


def seed_lessons(n: int) -> tuple[Workspace, Workspace]:
    big, _ = Workspace.objects.get_or_create(slug="abuse-big")
    tiny, _ = Workspace.objects.get_or_create(slug="abuse-tiny")
    have = Lesson.objects.filter(workspace=big).count()
    if have == n:
        return big, tiny
    model = embeddings.expected_model_id() or "synthetic"
    dims = settings.EMBEDDING_DIMENSIONS
    t0 = time.perf_counter()
    Lesson.objects.filter(workspace__in=[big, tiny]).delete()
    topics = "ARRAY[" + ",".join(f"'{t}'" for t in TOPICS) + "]"

    def words(k: int) -> str:
        return (
            f"(SELECT string_agg(CASE WHEN random() < 0.15 THEN ({topics})[1 + floor(random() * {len(TOPICS)})::int]"
            f" ELSE 'w' || (floor(power(random(), -1 / 1.1))::int %% 20000)::text END, ' ')"
            f" FROM generate_series(1, {k}) WHERE g > 0)"
        )

    sql = f"""
    INSERT INTO lessons_lesson (situation, mistake, correction, tags, trigger, content, fact_id, category,
        confidence, provenance, access_count, last_accessed, score, agent, occurrences, status, created_at, updated_at,
        lang, embedding_model, chatcli_extra, workspace_id, embedding)
    SELECT s, m, c, ARRAY['bench']::varchar[], 'error',
        'LESSON: ' || s || E'\\nMISTAKE: ' || m || E'\\nCORRECTION: ' || c, left(md5(g::text || %s), 24),
        'lesson', 0.6, 'bench', 0, now(), 0, 'bench', 1, 'active', now(), now(), 'en', %s, '{{}}'::jsonb, %s, v
    FROM (
        SELECT g, {words(8)} AS s, {words(6)} AS m, {words(10)} AS c,
            (SELECT array_agg(random() - 0.5)::real[] FROM generate_series(1, {dims}) WHERE g > 0)::vector AS v
        FROM generate_series(1, %s) AS g
    ) AS rows
    """
    # One transaction (DDL is transactional in PostgreSQL): a failed seed leaves no index dropped.
    with transaction.atomic(), connection.cursor() as cur:
        # Bulk load: the table's secondary indexes (HNSW, GIN, trigram…) are dropped first and built once at
        # the end, which is many times faster than growing them row by row; constraint indexes stay.
        cur.execute(
            "SELECT i.relname, pg_get_indexdef(x.indexrelid) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "WHERE x.indrelid = 'lessons_lesson'::regclass "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)"
        )
        indexes = cur.fetchall() if n >= 20_000 else []
        for name, _ in indexes:
            cur.execute(f'DROP INDEX "{name}"')
        for start in range(0, n, 5000):
            cur.execute(sql, [f"b{start}", model, big.pk, min(5000, n - start)])
            if start % 50_000 == 0:
                print(f"  {start + 5000:,} rows ({time.perf_counter() - t0:.0f} s)", flush=True)
        cur.execute(sql, ["tiny", model, tiny.pk, 3])
        # The rows' foreign-key checks are deferred to the commit, and PostgreSQL builds no index on a
        # table with trigger events pending: run them now.
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cur.execute("SET LOCAL maintenance_work_mem = '2GB'")
        cur.execute("SET LOCAL max_parallel_maintenance_workers = 1")
        for name, ddl in indexes:
            t1 = time.perf_counter()
            cur.execute(ddl)
            print(f"  index {name} built in {time.perf_counter() - t1:.0f} s", flush=True)
    with connection.cursor() as cur:
        cur.execute("ANALYZE lessons_lesson")
    print(f"seeded {n:,} lessons in {time.perf_counter() - t0:.0f} s", flush=True)
    return big, tiny


def seed_gaps(n: int) -> None:
    Retrieval.objects.all().delete()
    dims = settings.EMBEDDING_DIMENSIONS
    model = embeddings.expected_model_id() or "synthetic"
    with connection.cursor() as cur:
        cur.execute(
            f"""INSERT INTO {Retrieval._meta.db_table} (task, agent, workspace, k, returned, gap, embedding,
                embedding_model, outcome_note, created_at)
            SELECT 'distinct task number ' || g || ' about w' || g, 'bench', 'abuse-big', 5, 0, true,
                (SELECT array_agg(random() - 0.5)::real[] FROM generate_series(1, {dims}) WHERE g > 0)::vector,
                %s, '', now() - g * interval '1 second'
            FROM generate_series(1, %s) AS g""",
            [model, n],
        )
