"""Throughput of chatcli's convergence scorers and of one cascade check, on drafts of a few sizes.

    .venv/bin/python bench/bench_refine_scorers.py

Prints checks per second for char, Jaccard, the default cascade (char → Jaccard → fallback), the cascade
with an embedding stage whose vectors come from the cache (hit path), and the word diff the compare
page renders. Pure CPU: no database, no LLM.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lessonboard.settings")

import django

django.setup()

from lessonboard.diff import side_by_side  # noqa: E402
from refine.convergence import Cascade, EmbeddingScorer  # noqa: E402
from refine.scorers import char_score, jaccard_score  # noqa: E402

WORDS = (
    "deploy service helm upgrade atomic rollback pods ready probes registry image tag cluster node queue "
    "retry backoff jitter lesson critique revised draft pass converge similarity cache breaker"
).split()


def draft(n_words: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words)) + "."


def mutate(text: str, rng: random.Random, rate: float) -> str:
    """Swap letters in place (same length): char similarity ≈ 1 − rate, so the cascade goes past char
    (0.3 ≤ char < 0.99) into Jaccard and, when wired, the embedding stage — its most expensive path."""
    return "".join(rng.choice("xyz") if ch.isalpha() and rng.random() < rate else ch for ch in text)


def rate(fn, a: str, b: str, seconds: float = 0.5) -> tuple[float, int]:
    count, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(20):
            fn(a, b)
        count += 20
    return count / elapsed, count


def main() -> None:
    rng = random.Random(7)
    vectors: dict[str, list[float]] = {}

    def embed(texts: list[str]) -> list[list[float]]:
        return [vectors.setdefault(t, [rng.random() for _ in range(384)]) for t in texts]

    cached = EmbeddingScorer(embed)
    with_embedding = Cascade(embedding=cached)
    default = Cascade()
    print(f"{'draft':>12} {'scorer':>28} {'checks/s':>12} {'µs/check':>10}")
    for n_words in (50, 300, 2000):
        a = draft(n_words, rng)
        b = mutate(a, rng, 0.03)
        cached.score(a, b)  # warm the cache: the benchmark measures the hit path
        size = f"{len(a.encode())} B"
        trail = [e.scorer for e in with_embedding.check(a, b).trail]
        print(f"{size:>12} cascade trail on this pair: {' → '.join(trail)}")
        for name, fn in (
            ("char", char_score),
            ("jaccard", jaccard_score),
            ("cascade (default)", default.check),
            ("cascade + embedding (cached)", with_embedding.check),
            ("word diff (compare page)", side_by_side),
        ):
            per_second, _ = rate(fn, a, b)
            print(f"{size:>12} {name:>28} {per_second:>12,.0f} {1e6 / per_second:>10.1f}")


if __name__ == "__main__":
    main()
