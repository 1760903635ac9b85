"""Retrieval quality on tests/data/retrieval_eval.jsonl for the local embedders: recall@1, recall@5 and
MRR per query kind (the original set; next-task queries, tuning and held-out halves of the first 60 and of
batch 2, the 60 added later; Portuguese), for
keyword-only, vector-only and fused rankings over a grid of text weights, and the floor: how many
off-topic queries (tuning and held-out halves) get an empty answer and how many on-topic ones lose
theirs, per margin. Picks nothing by itself: docs/lessons.md quotes the figures and the chosen defaults.

    .venv/bin/python bench/bench_retrieval_eval.py [--models use e5 minilm]

``--table`` prints instead, for the seven evaluation sets (tests/data/retrieval_eval.jsonl, the independent
retrieval_eval_2.jsonl, and retrieval_eval_3.jsonl to retrieval_eval_7.jsonl, written blind), R@1/R@5/MRR per
query kind and half (tuning / held-out) for each single branch (``retrieval.search`` with only that branch:
text, vector, tags) and for the defaults (every branch, the floor on, as ``POST /api/v1/lessons/retrieve``
answers), how many off-topic queries per half (and per group, where a set has groups) got no lesson, and how
many of the off-topic probes (tests/data/retrieval_offtopic_probes*.jsonl) got none against each store:

    .venv/bin/python bench/bench_retrieval_eval.py --table [--models use]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import bench_lessons_db

bench_lessons_db.setup("lessonboard_bench_eval")  # its own database: the scale bench may be running

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from lessons import embeddings, evaluation, retrieval, vectors  # noqa: E402
from lessons.models import Lesson  # noqa: E402

EVAL = bench_lessons_db.ROOT / "tests" / "data" / "retrieval_eval.jsonl"
EVAL_2 = bench_lessons_db.ROOT / "tests" / "data" / "retrieval_eval_2.jsonl"
EVAL_3 = bench_lessons_db.ROOT / "tests" / "data" / "retrieval_eval_3.jsonl"
EVAL_4 = bench_lessons_db.ROOT / "tests" / "data" / "retrieval_eval_4.jsonl"
EVAL_5 = bench_lessons_db.ROOT / "tests" / "data" / "retrieval_eval_5.jsonl"
EVAL_6 = bench_lessons_db.ROOT / "tests" / "data" / "retrieval_eval_6.jsonl"
EVAL_7 = bench_lessons_db.ROOT / "tests" / "data" / "retrieval_eval_7.jsonl"
PROBES = bench_lessons_db.ROOT / "tests" / "data" / "retrieval_offtopic_probes.jsonl"
PROBES_2 = bench_lessons_db.ROOT / "tests" / "data" / "retrieval_offtopic_probes_2.jsonl"
PROBES_3 = bench_lessons_db.ROOT / "tests" / "data" / "retrieval_offtopic_probes_3.jsonl"
SINGLE = {"text only": ("text",), "vector only": ("vector",), "tags only": ("tags",)}


def use_model(model: str) -> None:
    settings.EMBEDDING_PROVIDER = "local"
    settings.EMBEDDING_LOCAL_MODEL = model
    settings.EMBEDDING_DIMENSIONS = embeddings.LOCAL_DIMENSIONS[model]
    settings.RETRIEVAL_WEIGHT_TEXT = settings.LESSONS_MODEL_DEFAULTS[model]["weight_text"]
    settings.RETRIEVAL_WEIGHT_TAGS = settings.LESSONS_MODEL_DEFAULTS[model]["weight_tags"]
    settings.RETRIEVAL_WEIGHT_TEXT_EXACT = settings.LESSONS_MODEL_DEFAULTS[model]["weight_text_exact"]
    settings.RETRIEVAL_FUSION = settings.LESSONS_MODEL_DEFAULTS[model]["fusion"]
    settings.RETRIEVAL_DEPTH = settings.LESSONS_MODEL_DEFAULTS[model]["depth"]
    settings.RETRIEVAL_FLOOR_MARGIN = settings.LESSONS_MODEL_DEFAULTS[model]["floor_margin"]
    settings.RETRIEVAL_FLOOR_MARGIN_AGREE = settings.LESSONS_MODEL_DEFAULTS[model].get(
        "floor_margin_agree", settings.RETRIEVAL_FLOOR_MARGIN
    )
    settings.RETRIEVAL_FLOOR_SOFTWARE_MIN = settings.LESSONS_MODEL_DEFAULTS[model]["software_min"]
    settings.RETRIEVAL_FLOOR_SOFTWARE_SLIDE = settings.LESSONS_MODEL_DEFAULTS[model].get("floor_software_slide", 0.0)


def load_set(data: evaluation.EvalSet) -> dict[str, int]:
    bench_lessons_db.empty_lessons()
    if vectors.column_dimensions() != settings.EMBEDDING_DIMENSIONS:
        vectors.resize_column(settings.EMBEDDING_DIMENSIONS)
    ids = evaluation.store(data)
    vectors.embed_pending()
    with connection.cursor() as cursor:  # the full-text branch's idf comes from the planner statistics
        cursor.execute("ANALYZE lessons_lesson")
    retrieval.reset_term_stats()
    retrieval.query_vectors().clear()
    return ids


def table(models: list[str]) -> None:
    """Per kind and half, per single branch and the defaults, on both sets (see the module)."""
    all_on = retrieval.Weights(1.0, 1.0, 1.0)
    for model in models:
        use_model(model)
        for label, path in (
            ("set 1", EVAL),
            ("set 2", EVAL_2),
            ("set 3", EVAL_3),
            ("set 4", EVAL_4),
            ("set 5", EVAL_5),
            ("set 6", EVAL_6),
            ("set 7", EVAL_7),
        ):
            data = evaluation.load(path)
            ids = load_set(data)
            print(f"\n== {model}, {label} ({path.name}): {len(data.lessons)} lessons, {len(data.queries)} queries")
            configs: dict[str, Callable[[str], list[int]]] = {
                name: (
                    lambda q, b=branches: [
                        h.lesson.pk for h in retrieval.search(q, k=10, branches=b, weights=all_on, floor=False).hits
                    ]
                )
                for name, branches in SINGLE.items()
            }
            configs["defaults, no floor"] = lambda q: [h.lesson.pk for h in retrieval.search(q, k=10, floor=False).hits]
            configs["defaults"] = lambda q: [h.lesson.pk for h in retrieval.search(q, k=10).hits]
            cache: dict[tuple[str, str], list[int]] = {}

            def cached(name: str, cache: dict = cache, configs: dict = configs) -> Callable[[str], list[int]]:
                def ranked(q: str) -> list[int]:
                    if (name, q) not in cache:
                        cache[(name, q)] = configs[name](q)
                    return cache[(name, q)]

                return ranked

            print(f"  {'kind / half':<24}{'n':>4}  " + " | ".join(f"{name:<17}" for name in configs))
            totals: dict[str, list[dict]] = {"tune": [], "heldout": []}
            for (kind, half), group in evaluation.by_kind_and_half(data).items():
                if kind == "off-topic":
                    cells = []
                    for name in configs:
                        empty, total = evaluation.empty_answers(group, cached(name))
                        cells.append(f"empty {empty}/{total}".ljust(17))
                    print(f"  {kind + ' ' + half:<24}{len(group.queries):>4}  " + " | ".join(cells))
                    kinds_of = sorted({query["group"] for query in group.queries if "group" in query})
                    for name in kinds_of:  # set 5's off-topic tasks are of three groups
                        chosen = evaluation.EvalSet(
                            [], [query for query in group.queries if query.get("group") == name]
                        )
                        empty, total = evaluation.empty_answers(chosen, cached("defaults"))
                        print(f"    {name:<22}{total:>4}  defaults: empty {empty}/{total}")
                    continue
                totals[half] += group.queries
                cells = [evaluation.measure(group, ids, cached(name)) for name in configs]
                print(
                    f"  {kind + ' ' + half:<24}{len(group.queries):>4}  "
                    + " | ".join(f"{m.recall_at_1:.2f}/{m.recall_at_5:.2f}/{m.mrr:.2f}".ljust(17) for m in cells)
                )
            for half, queries in totals.items():
                if not queries:  # set 3 is held out whole
                    continue
                group = evaluation.EvalSet(data.lessons, queries)
                cells = [evaluation.measure(group, ids, cached(name)) for name in configs]
                print(
                    f"  {'all on-topic ' + half:<24}{len(queries):>4}  "
                    + " | ".join(f"{m.recall_at_1:.2f}/{m.recall_at_5:.2f}/{m.mrr:.2f}".ljust(17) for m in cells)
                )
            probes = evaluation.load(PROBES).queries
            cells = []
            for half in ("tune", "heldout"):
                for group_name in ("everyday", "user-computing"):
                    chosen = [p for p in probes if evaluation.split_of(p) == half and p["group"] == group_name]
                    empty, total = evaluation.empty_answers(evaluation.EvalSet([], chosen), cached("defaults"))
                    cells.append(f"{group_name} {half} {empty}/{total}")
            print("  off-topic probes against this store, defaults, answered with nothing: " + ", ".join(cells))
            for label, path in (("second", PROBES_2), ("third", PROBES_3)):
                cells = []
                for group_name in ("everyday", "user-computing"):
                    for lang in ("en", "pt"):
                        chosen = [
                            p for p in evaluation.load(path).queries if (p["group"], p["lang"]) == (group_name, lang)
                        ]
                        empty, total = evaluation.empty_answers(evaluation.EvalSet([], chosen), cached("defaults"))
                        cells.append(f"{group_name} {lang} {empty}/{total}")
                print(
                    f"  {label} probes (all held out) against this store, defaults, answered with nothing: "
                    + ", ".join(cells)
                )


MARGINS = (-0.05, -0.03, -0.02, -0.01, 0.0, 0.005, 0.01, 0.02)
TEXT_WEIGHTS = (0.0, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


def fused_ranking(
    rankings: dict[str, dict[str, list[tuple[int, float]]]], weights: retrieval.Weights
) -> Callable[[str], list[int]]:
    def ranked(phrase: str) -> list[int]:
        present = {b: rows for b, rows in rankings[phrase].items() if weights.of(b) > 0}
        return [pk for pk, _, _ in retrieval.fuse(present, weights, settings.RETRIEVAL_RRF_K)]

    return ranked


def query_embedding_ms(models: list[str], texts: list[str], rounds: int = 3) -> dict[str, float]:
    """Milliseconds per query embedding of each model, measured in turns over the same tasks in the same
    run (the machine is shared: compare the ratios, not the figures)."""
    providers = {model: embeddings.load("local", model) for model in models}
    for provider in providers.values():
        assert provider is not None
        provider.embed_query("warm up")
    spent = dict.fromkeys(models, 0.0)
    for _ in range(rounds):
        for text in texts:
            for model, provider in providers.items():
                assert provider is not None
                start = time.perf_counter()
                provider.embed_query(text)
                spent[model] += time.perf_counter() - start
    return {model: spent[model] / (rounds * len(texts)) * 1000 for model in models}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["use", "e5", "minilm"], choices=["use", "e5", "minilm"])
    parser.add_argument("--table", action="store_true", help="per kind and half on both sets (see the module)")
    args = parser.parse_args()
    if args.table:
        table(args.models if args.models != parser.get_default("models") else ["use"])
        return
    data = evaluation.load(EVAL)
    kinds = {
        "original": evaluation.subset(data, query_type="original"),
        "next-task tune": evaluation.subset(data, query_type="next-task", split="tune", batch=1),
        "next-task held": evaluation.subset(data, query_type="next-task", split="heldout", batch=1),
        "batch-2 tune": evaluation.subset(data, query_type="next-task", split="tune", batch=2),
        "batch-2 held": evaluation.subset(data, query_type="next-task", split="heldout", batch=2),
    }
    pt = evaluation.EvalSet(data.lessons, [q for q in data.queries if q.get("lang") == "pt" and q["relevant"]])
    off = {
        s: evaluation.subset(data, query_type="off-topic", split=s).queries for s in ("tune", "heldout", "heldout-2")
    }
    on_topic = [q for q in data.queries if q["relevant"]]
    print(
        f"{len(data.lessons)} lessons, {len(data.queries)} queries "
        f"({', '.join(f'{k} {len(v.queries)}' for k, v in kinds.items())}, pt next-task {len(pt.queries)}, "
        f"off-topic {len(off['tune'])}+{len(off['heldout'])}+{len(off['heldout-2'])}); RRF k={settings.RETRIEVAL_RRF_K}, "
        f"depth {settings.RETRIEVAL_DEPTH}"
    )
    timing = query_embedding_ms(args.models, [q["query"] for q in data.queries[:60]])
    anchor = "e5" if "e5" in timing else args.models[0]
    print(
        "query embedding (same run, in turns, 60 tasks × 3): "
        + ", ".join(f"{m} {ms:.1f} ms ({ms / timing[anchor]:.2f}× {anchor})" for m, ms in timing.items())
    )
    for model in args.models:
        settings.EMBEDDING_PROVIDER = "local"
        settings.EMBEDDING_LOCAL_MODEL = model
        settings.EMBEDDING_DIMENSIONS = embeddings.LOCAL_DIMENSIONS[model]
        # The model's own measured defaults (lessonboard/settings.py), as a deployment running it gets them.
        settings.RETRIEVAL_WEIGHT_TEXT = settings.LESSONS_MODEL_DEFAULTS[model]["weight_text"]
        settings.RETRIEVAL_FLOOR_MARGIN = settings.LESSONS_MODEL_DEFAULTS[model]["floor_margin"]
        bench_lessons_db.empty_lessons()
        if vectors.column_dimensions() != settings.EMBEDDING_DIMENSIONS:
            vectors.resize_column(settings.EMBEDDING_DIMENSIONS)
        ids = evaluation.store(data)
        provider = embeddings.provider()
        assert provider is not None
        start = time.perf_counter()
        vectors.embed_pending()
        embed_s = time.perf_counter() - start
        assert Lesson.objects.filter(embedding__isnull=True).count() == 0
        print(f"\n== {model} ({provider.model_id}): embedded {len(data.lessons)} lessons in {embed_s:.2f}s")
        base = Lesson.objects.active()
        depth = settings.RETRIEVAL_DEPTH
        rankings: dict[str, dict[str, list[tuple[int, float]]]] = {}
        gaps: dict[str, float] = {}
        start = time.perf_counter()
        for query in data.queries:
            q = query["query"]
            vector = provider.embed_query(q)
            vec = retrieval.vector_branch(vector, base, depth, provider.model_id)
            rankings[q] = {"text": retrieval.text_branch(q, base, depth), "vector": vec}
            check = retrieval.floor_check(vector, vec[0][1], provider)
            gaps[q] = check["best_similarity"] - check["background_similarity"]
        per_query_ms = (time.perf_counter() - start) / len(data.queries) * 1000
        print(f"text + vector branches and the floor: {per_query_ms:.1f} ms per query (incl. query embedding)")

        def row(label: str, weights: retrieval.Weights, ids: dict = ids, rankings: dict = rankings) -> None:
            ranked = fused_ranking(rankings, weights)
            cells = [evaluation.measure(s, ids, ranked) for s in (*kinds.values(), pt)]
            print(f"  {label:<17}" + " | ".join(f"{m.recall_at_1:.3f}/{m.recall_at_5:.3f}/{m.mrr:.3f}" for m in cells))

        print("  R@1/R@5/MRR       " + " | ".join(f"{k:<17}" for k in (*kinds, "pt next-task")))
        row("keyword-only", retrieval.Weights(1, 0, 0))
        row("vector-only", retrieval.Weights(0, 1, 0))
        for text in TEXT_WEIGHTS[1:]:
            row(f"fused text={text}", retrieval.Weights(text, 1, 0))
        print(f"  defaults (text={settings.RETRIEVAL_WEIGHT_TEXT}):")
        row("defaults", retrieval.Weights.from_settings())
        print("  floor (best lesson − closest background sentence ≥ margin):")
        for margin in MARGINS:
            answered = {s: sum(1 for q in off[s] if gaps[q["query"]] >= margin) for s in off}
            emptied = [q for q in on_topic if gaps[q["query"]] < margin]
            ranked = fused_ranking(rankings, retrieval.Weights.from_settings())

            def floored(phrase: str, margin: float = margin, ranked=ranked, gaps: dict = gaps) -> list[int]:
                return ranked(phrase) if gaps[phrase] >= margin else []

            held = evaluation.measure(kinds["next-task held"], ids, floored)
            held2 = evaluation.measure(kinds["batch-2 held"], ids, floored)
            orig = evaluation.measure(kinds["original"], ids, floored)
            print(
                f"    margin {margin:+.3f}: off-topic answered {answered['tune']}/{len(off['tune'])} (tune) "
                f"{answered['heldout']}/{len(off['heldout'])} (held-out) "
                f"{answered['heldout-2']}/{len(off['heldout-2'])} (held-out 2); on-topic emptied {len(emptied)}/{len(on_topic)}; "
                f"with the floor R@5 original {orig.recall_at_5:.3f}, next-task held-out {held.recall_at_5:.3f}, "
                f"batch-2 held-out {held2.recall_at_5:.3f}"
            )


if __name__ == "__main__":
    main()
