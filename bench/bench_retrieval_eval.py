"""Retrieval quality on tests/data/retrieval_eval.jsonl for both local embedders and a grid of branch
weights: recall@1, recall@5, MRR for keyword-only, vector-only, tags-only and fused. Also embedding
throughput on the set. Picks nothing by itself: the README quotes the figures and the chosen defaults.

    .venv/bin/python bench/bench_retrieval_eval.py
"""

from __future__ import annotations

import itertools
import time

import bench_lessons_db

bench_lessons_db.setup("lessonboard_bench_eval")  # its own database: the scale bench may be running

from django.conf import settings  # noqa: E402

from lessons import embeddings, evaluation, retrieval, vectors  # noqa: E402
from lessons.models import Lesson  # noqa: E402

EVAL = bench_lessons_db.ROOT / "tests" / "data" / "retrieval_eval.jsonl"


def main() -> None:
    data = evaluation.load(EVAL)
    print(
        f"{len(data.lessons)} lessons, {len(data.queries)} queries; RRF k={settings.LESSONS_RRF_K}, depth {settings.LESSONS_RRF_DEPTH}"
    )
    for model in ("minilm", "e5"):
        settings.LESSONS_EMBEDDING_PROVIDER = "local"
        settings.LESSONS_EMBEDDING_LOCAL_MODEL = model
        bench_lessons_db.empty_lessons()
        ids = evaluation.store(data)
        start = time.perf_counter()
        provider = embeddings.provider()
        load_s = time.perf_counter() - start
        start = time.perf_counter()
        vectors.embed_pending()
        embed_s = time.perf_counter() - start
        assert Lesson.objects.filter(embedding__isnull=True).count() == 0
        print(
            f"\n== {model} ({provider.model_id if provider else '-'}): load {load_s:.2f}s, "
            f"embedded {len(data.lessons)} lessons in {embed_s:.2f}s ({len(data.lessons) / embed_s:.0f}/s)"
        )
        rankings: dict[str, dict[str, list[tuple[int, float]]]] = {}
        base = Lesson.objects.active()
        depth = settings.LESSONS_RRF_DEPTH
        start = time.perf_counter()
        for query in data.queries:
            q = query["query"]
            vector = provider.embed_query(q)  # type: ignore[union-attr]
            rankings[q] = {
                "text": retrieval.text_branch(q, base, depth),
                "vector": retrieval.vector_branch(vector, base, depth, provider.model_id),  # type: ignore[union-attr]
                "tags": retrieval.tag_branch(q, base, depth),
            }
        per_query_ms = (time.perf_counter() - start) / len(data.queries) * 1000
        print(f"three branches per query: {per_query_ms:.1f} ms (incl. query embedding)")

        def run(weights: retrieval.Weights, rankings: dict = rankings, ids: dict = ids) -> evaluation.Metrics:
            def ranked(phrase: str) -> list[int]:
                present = {b: rows for b, rows in rankings[phrase].items() if weights.of(b) > 0}
                return [pk for pk, _, _ in retrieval.fuse(present, weights, settings.LESSONS_RRF_K)]

            return evaluation.measure(data, ids, ranked)

        print(run(retrieval.Weights(1, 0, 0)).line("keyword-only"))
        print(run(retrieval.Weights(0, 1, 0)).line("vector-only"))
        print(run(retrieval.Weights(0, 0, 1)).line("tags-only"))
        print(run(retrieval.Weights(1, 1, 1)).line("equal 1/1/1"))
        grid = []
        for text, tags in itertools.product(
            (0.0, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0), (0.0, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
        ):
            metrics = run(retrieval.Weights(text, 1.0, tags))
            grid.append((metrics.recall_at_5, metrics.mrr, text, tags, metrics))
        grid.sort(key=lambda row: (-(row[0] + row[1]), -row[0]))
        portuguese = evaluation.EvalSet(
            data.lessons, [q for q in data.queries if any(i.startswith("pt-") for i in q["relevant"])]
        )
        defaults = retrieval.Weights.from_settings()

        def run_pt(
            weights: retrieval.Weights,
            rankings: dict = rankings,
            ids: dict = ids,
            subset: evaluation.EvalSet = portuguese,
        ) -> evaluation.Metrics:
            def ranked(phrase: str) -> list[int]:
                present = {b: rows for b, rows in rankings[phrase].items() if weights.of(b) > 0}
                return [pk for pk, _, _ in retrieval.fuse(present, weights, settings.LESSONS_RRF_K)]

            return evaluation.measure(subset, ids, ranked)

        print(run(defaults).line("defaults"))
        print(f"{len(portuguese.queries)} queries about Portuguese lessons:")
        print("  " + run_pt(retrieval.Weights(1, 0, 0)).line("keyword-only"))
        print("  " + run_pt(retrieval.Weights(0, 1, 0)).line("vector-only"))
        print("  " + run_pt(defaults).line("defaults"))
        print("best weights by recall@5 + MRR (text, vector=1, tags):")
        for _r5, _mrr, text, tags, metrics in grid[:8]:
            print("  " + metrics.line(f"t={text} g={tags}"))


if __name__ == "__main__":
    main()
