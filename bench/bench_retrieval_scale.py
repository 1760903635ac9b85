"""Retrieval at scale: synthetic lessons with clustered 384-d vectors in PostgreSQL + pgvector (HNSW, cosine).

For each size: bulk load (binary COPY), HNSW build time, HNSW recall@10 against exact search (numpy
brute force over the same vectors), and latency p50/p95 of the vector branch, the full-text branch, and
the whole hybrid ``retrieval.search`` (which also embeds the query text with the configured local model).

    .venv/bin/python bench/bench_retrieval_scale.py --sizes 100000 [1000000] [--queries 200]

Vectors are synthetic (cluster centre + noise, normalised) because embedding a million texts with the
local models would take hours on this machine; texts are random lesson-like words. Prints figures only.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import bench_lessons_db

bench_lessons_db.setup()

import numpy as np  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

from lessons import embeddings, retrieval  # noqa: E402
from lessons.models import Lesson  # noqa: E402

DIMS = settings.EMBEDDING_DIMENSIONS
TOPICS = (
    "edit large file patch rewrite timeout retry backoff rate limit 429 migration column index lock "
    "git rebase conflict markers dependency pin version flaky test sleep poll path relative workspace "
    "docker cache build deploy secret token encoding csv json yaml parser worker queue celery postgres"
).split()
MODEL_ID = embeddings.expected_model_id() or "synthetic"  # so search() uses these rows


HYBRID_QUERIES = 100
NOISE = 1.5  # per-vector noise norm relative to the cluster centre (--noise)
E5_NOISE = 0.7  # isotropic noise of --shape e5, relative to a real residual's norm (matched to real e5 neighbours)


def synthetic(n: int, rnd: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    labels = rnd.integers(0, len(centres), size=n)
    vectors = centres[labels] + NOISE * rnd.standard_normal((n, DIMS), dtype=np.float32) / np.sqrt(DIMS)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def e5_shaped(n: int, rnd: np.random.Generator, real: np.ndarray) -> np.ndarray:
    """Vectors shaped like real e5 lesson embeddings: the real mean direction (e5 is anisotropic: two
    unrelated lessons have cosine ~0.83) plus a random mix of three real lessons' residuals and a little
    isotropic noise, so nearest neighbours are only a few hundredths closer than a random pair."""
    mean = real.mean(axis=0)
    residuals = real - mean
    picks = rnd.integers(0, len(real), size=(n, 3))
    mix = rnd.dirichlet(np.ones(3), size=n).astype(np.float32)
    spread = float(np.linalg.norm(residuals, axis=1).mean())
    noise = rnd.standard_normal((n, DIMS), dtype=np.float32) * (E5_NOISE * spread / np.sqrt(DIMS))
    vectors = mean + np.einsum("nk,nkd->nd", mix, residuals[picks]) + noise
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def real_lesson_vectors() -> np.ndarray:
    """The configured model's vectors of the eval set's lessons (tests/data/retrieval_eval.jsonl), made as
    the store makes them (whole text, plus the situation alone for a model that adds it)."""
    from lessons import evaluation

    data = evaluation.load(bench_lessons_db.ROOT / "tests" / "data" / "retrieval_eval.jsonl")
    provider = embeddings.provider()
    assert provider is not None
    texts = [" ".join([lesson["situation"], lesson["mistake"], lesson["correction"]]) for lesson in data.lessons]
    vectors = provider.embed_documents(texts)
    if getattr(provider, "situation_vector", False):
        vectors = vectors + provider.embed_documents([lesson["situation"] for lesson in data.lessons])
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32)


def neighbour_stats(vectors: np.ndarray) -> str:
    """Nearest-neighbour and random-pair cosine medians of a sample: how clustered a vector set is."""
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -2.0)
    pairs = sims[np.triu_indices(len(vectors), 1)]
    return f"nearest-neighbour cosine p50 {np.median(sims.max(axis=1)):.3f}, random pair p50 {np.median(pairs):.3f}"


def text(rnd: random.Random, words: int) -> str:
    return " ".join(
        rnd.choice(TOPICS) if rnd.random() < 0.15 else f"w{int(rnd.paretovariate(1.1)) % 20000}" for _ in range(words)
    )


def load(n: int, vectors: np.ndarray) -> float:
    bench_lessons_db.empty_lessons()
    rnd = random.Random(n)
    raw = connection.connection
    register_vector(raw)
    start = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS lesson_embedding_hnsw")
    columns = (
        "situation, mistake, correction, tags, trigger, content, fact_id, category, confidence, provenance, "
        "access_count, last_accessed, score, agent, status, created_at, updated_at, embedding, embedding_model, "
        "chatcli_extra, lang, occurrences"
    )
    with raw.cursor() as cur, cur.copy(f"COPY lessons_lesson ({columns}) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(
            [
                "text",
                "text",
                "text",
                "varchar[]",
                "varchar",
                "text",
                "varchar",
                "varchar",
                "float8",
                "varchar",
                "int4",
                "timestamptz",
                "float8",
                "varchar",
                "varchar",
                "timestamptz",
                "timestamptz",
                "vector",
                "varchar",
                "jsonb",
                "varchar",
                "int4",
            ]
        )
        now = time.time()
        from datetime import UTC, datetime

        stamp = datetime.fromtimestamp(now, UTC)
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
                    vectors[i],
                    MODEL_ID,
                    "{}",
                    "en",
                    1,  # occurrences (migration 0009_integrity gave it no database default)
                )
            )
    raw.commit() if not raw.autocommit else None
    return time.perf_counter() - start


def build_index() -> float:
    start = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '2GB'")
        cursor.execute(
            "CREATE INDEX IF NOT EXISTS lesson_embedding_hnsw ON lessons_lesson USING hnsw (embedding vector_cosine_ops) "
            "WITH (m = 16, ef_construction = 64)"
        )
        cursor.execute("ANALYZE lessons_lesson")
    return time.perf_counter() - start


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run(n: int, queries: int, sweep: list[int], reuse: bool, real: np.ndarray | None) -> None:
    rnd = np.random.default_rng(n)
    centres = rnd.standard_normal((max(50, n // 100), DIMS), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def generate(count: int) -> np.ndarray:
        return synthetic(count, rnd, centres) if real is None else e5_shaped(count, rnd, real)

    vectors = generate(n)  # deterministic per n and shape: --reuse finds the same rows
    if real is not None:
        print(f"e5-shaped sample of {len(real)}: {neighbour_stats(vectors[: len(real)])}")
    if reuse and Lesson.objects.filter(embedding_model=MODEL_ID).count() == n:
        print(f"\n== {n:,} lessons: reusing the loaded table and its HNSW index")
    else:
        load_s = load(n, vectors)
        index_s = build_index()
        print(f"\n== {n:,} lessons: COPY {load_s:.1f}s, HNSW build {index_s:.1f}s (m=16, ef_construction=64)")
    ids = np.array(Lesson.objects.order_by("id").values_list("id", flat=True))
    qvec = generate(queries)
    base = Lesson.objects.active()
    retrieval.reset_term_stats()
    recalls, vec_ms, text_ms = [], [], []
    for q in qvec:
        exact = set(ids[np.argpartition(-(vectors @ q), 10)[:10]].tolist())
        start = time.perf_counter()
        got = retrieval.vector_branch(q, base, 10, MODEL_ID)
        vec_ms.append((time.perf_counter() - start) * 1000)
        recalls.append(len(exact & {pk for pk, _ in got}) / 10)
    prnd = random.Random(1)
    phrases = [text(prnd, 8) for _ in range(queries)]
    for phrase in phrases:
        start = time.perf_counter()
        retrieval.text_branch(phrase, base, settings.RETRIEVAL_DEPTH)
        text_ms.append((time.perf_counter() - start) * 1000)
    # The anchor: raw pgvector HNSW SQL on the same table, in the same run, for the same tasks' query
    # vectors, at the vector branch's depth. A warm-up pass runs both over every task first (the first
    # to touch an HNSW page pays its read), then each task is timed both ways, interleaved. search()
    # embeds the task (distinct tasks: every one misses the query-vector cache); the floor is computed
    # but does not empty the answer (the synthetic vectors are nowhere near a real task's).
    embedder = embeddings.provider()
    assert embedder is not None
    tasks = phrases[:HYBRID_QUERIES]
    task_vectors = [embedder.embed_query(task) for task in tasks]

    def anchor_sql(vector: np.ndarray) -> float:
        start = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM lessons_lesson ORDER BY embedding <=> %s::vector LIMIT %s",
                [str(vector.tolist()), settings.RETRIEVAL_DEPTH],
            )
            cursor.fetchall()
        return (time.perf_counter() - start) * 1000

    with connection.cursor() as cursor:
        cursor.execute("SET hnsw.ef_search = %s", [settings.RETRIEVAL_EF_SEARCH])
    for task, vector in zip(tasks, task_vectors, strict=True):
        anchor_sql(vector)
        retrieval.search(task, k=5, floor=False)
    retrieval.query_vectors().clear()
    anchor_ms, hybrid_ms = [], []
    for task, vector in zip(tasks, task_vectors, strict=True):
        anchor_ms.append(anchor_sql(vector))
        start = time.perf_counter()
        retrieval.search(task, k=5, floor=False)
        hybrid_ms.append((time.perf_counter() - start) * 1000)
    with connection.cursor() as cursor:
        cursor.execute("RESET hnsw.ef_search")
    cached_ms = []
    for task in tasks:  # the same tasks again: query vectors from the LRU cache
        start = time.perf_counter()
        retrieval.search(task, k=5, floor=False)
        cached_ms.append((time.perf_counter() - start) * 1000)
    embed_ms = []
    for task in tasks[:30]:
        start = time.perf_counter()
        embedder.embed_query(task + " ")
        embed_ms.append((time.perf_counter() - start) * 1000)
    provider = settings.EMBEDDING_PROVIDER
    settings.EMBEDDING_PROVIDER = "none"
    lexical_ms = []
    for phrase in tasks:
        start = time.perf_counter()
        retrieval.search(phrase, k=5)
        lexical_ms.append((time.perf_counter() - start) * 1000)
    settings.EMBEDDING_PROVIDER = provider
    print(f"HNSW recall@10 vs exact (ef_search={settings.RETRIEVAL_EF_SEARCH}): {statistics.mean(recalls):.3f}")
    print(f"vector branch (top 10):   p50 {pct(vec_ms, 50):7.1f} ms  p95 {pct(vec_ms, 95):7.1f} ms")
    print(f"full-text branch (top 20): p50 {pct(text_ms, 50):7.1f} ms  p95 {pct(text_ms, 95):7.1f} ms")
    print(f"search() lexical only:     p50 {pct(lexical_ms, 50):7.1f} ms  p95 {pct(lexical_ms, 95):7.1f} ms")
    print(f"search() hybrid:           p50 {pct(hybrid_ms, 50):7.1f} ms  p95 {pct(hybrid_ms, 95):7.1f} ms", end="")
    print(f"  (incl. the {settings.EMBEDDING_LOCAL_MODEL} query embedding, {HYBRID_QUERIES} distinct tasks)")
    print(f"search() hybrid, cached:   p50 {pct(cached_ms, 50):7.1f} ms  p95 {pct(cached_ms, 95):7.1f} ms")
    print(f"query embedding alone:     p50 {pct(embed_ms, 50):7.1f} ms  p95 {pct(embed_ms, 95):7.1f} ms")
    anchor = pct(anchor_ms, 95)
    print(f"anchor raw HNSW SQL:       p50 {pct(anchor_ms, 50):7.1f} ms  p95 {anchor:7.1f} ms")
    print(
        f"ratio p95 search()/raw SQL: hybrid {pct(hybrid_ms, 95) / anchor:.1f}x, cached {pct(cached_ms, 95) / anchor:.1f}x, "
        f"lexical {pct(lexical_ms, 95) / anchor:.1f}x"
    )
    default_ef = settings.RETRIEVAL_EF_SEARCH
    exact_sets = [set(ids[np.argpartition(-(vectors @ q), 10)[:10]].tolist()) for q in qvec]
    for ef in sweep:
        settings.RETRIEVAL_EF_SEARCH = ef
        ms, hits = [], []
        for q, exact in zip(qvec, exact_sets, strict=True):
            start = time.perf_counter()
            got = retrieval.vector_branch(q, base, 10, MODEL_ID)
            ms.append((time.perf_counter() - start) * 1000)
            hits.append(len(exact & {pk for pk, _ in got}) / 10)
        print(
            f"  ef_search={ef:<4} recall@10 {statistics.mean(hits):.3f}  p50 {pct(ms, 50):6.1f} ms  p95 {pct(ms, 95):6.1f} ms"
        )
    settings.RETRIEVAL_EF_SEARCH = default_ef


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--noise", type=float, default=NOISE, help="0 = tight clusters; 3+ = nearly uniform")
    parser.add_argument(
        "--shape",
        choices=("clusters", "e5"),
        default="clusters",
        help="clusters: random centres + noise; e5: shaped like real e5 lesson vectors (see e5_shaped)",
    )
    parser.add_argument("--ef-sweep", type=int, nargs="*", default=[40, 200, 400], help="extra hnsw.ef_search values")
    parser.add_argument("--reuse", action="store_true", help="keep a table of the same size already loaded")
    parser.add_argument("--keep", action="store_true", help="leave the last table loaded (for --reuse)")
    args = parser.parse_args()
    globals()["NOISE"] = args.noise
    real = None
    if args.shape == "e5":
        real = real_lesson_vectors()
        print(f"synthetic vectors: {DIMS} dims, e5-shaped; {args.queries} queries")
        print(f"real lesson vectors of {settings.EMBEDDING_LOCAL_MODEL} ({len(real)}): {neighbour_stats(real)}")
    else:
        print(f"synthetic vectors: {DIMS} dims, cluster centres + noise {args.noise}; {args.queries} queries")
    for n in args.sizes:
        run(n, args.queries, args.ef_sweep, args.reuse, real)
    if not args.keep:
        bench_lessons_db.empty_lessons()
        build_index()


if __name__ == "__main__":
    main()
