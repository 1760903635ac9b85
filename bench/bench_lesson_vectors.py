"""What a ``use`` lesson vector is made of: today's sum (whole text + situation) against variants that add
one more text to the sum, on the **tuning halves** of both evaluation sets (the held-out halves only with
``--heldout``, after a choice). Per kind, R@5 / MRR, vector branch alone and the default score fusion.

    .venv/bin/python bench/bench_lesson_vectors.py [--heldout]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import bench_retrieval_eval as bre
import bench_retrieval_fusion as brf  # sets Django up on the bench database
from django.conf import settings

from lessons import evaluation, lesson_vectors, vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heldout", action="store_true", help="also print the held-out halves")
    args = parser.parse_args()
    today = lesson_vectors.lesson_texts

    def tags_text(lesson: Any) -> str:
        return " ".join(t for t in (lesson.tags or []) if t != "reflexion" and not t.startswith("trigger:"))

    variants: dict[str, Callable[[Any, Any], list[str]]] = {
        "today (whole + situation)": today,
        "+ situation and tags": lambda lesson, p: [*today(lesson, p), f"{lesson.situation} {tags_text(lesson)}"],
        "+ situation and correction": lambda lesson, p: [*today(lesson, p), f"{lesson.situation}\n{lesson.correction}"],
        "situation twice": lambda lesson, p: [*today(lesson, p), *today(lesson, p)[1:]],
    }
    bre.use_model(settings.EMBEDDING_LOCAL_MODEL)
    sets = {"set 1": evaluation.load(bre.EVAL), "set 2": evaluation.load(bre.EVAL_2)}
    halves = ["tune", "heldout"] if args.heldout else ["tune"]
    try:
        for name, texts in variants.items():
            lesson_vectors.lesson_texts = texts
            vectors.lesson_texts = texts  # type: ignore[attr-defined]
            for set_name, data in sets.items():
                ids, rows = brf.collect(data)
                rankings: dict[str, Callable[[str], list[int]]] = {
                    "vector": lambda q, rows=rows: [pk for pk, _ in rows[q]["vector"]],
                    "fused": lambda q, rows=rows: brf.score_fusion(rows[q], 0.5, 0.05, 50, 1.5, 1.5),
                }
                for half in halves:
                    for label, ranked in rankings.items():
                        kinds = brf.per_kind(data, ids, ranked, half)
                        cells = " | ".join(f"{k} {m.recall_at_5:.2f}/{m.mrr:.2f}" for k, m in kinds.items())
                        print(f"{name:<28} {set_name} {half:<7} {label:<6} {cells}", flush=True)
    finally:
        lesson_vectors.lesson_texts = today
        vectors.lesson_texts = today  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
