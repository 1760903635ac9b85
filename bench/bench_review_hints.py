"""Precision and recall of the review page's duplicate / contradiction hints on the labelled pairs in
tests/data/review_hint_pairs.jsonl (no database needed):

    .venv/bin/python bench/bench_review_hints.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lessonboard.settings")
django.setup()

from lessons.review.hint_eval import LABELS, evaluate  # noqa: E402


def main() -> None:
    report = evaluate(ROOT / "tests" / "data" / "review_hint_pairs.jsonl")
    print(f"{'label':<16}{'n':>4}{'recall':>9}{'precision':>11}   predicted as")
    for label in LABELS:
        row = {said: n for (truth, said), n in report.confusion.items() if truth == label}
        n = sum(row.values())
        detail = ", ".join(f"{k}: {v}" for k, v in sorted(row.items()))
        print(f"{label:<16}{n:>4}{report.recall(label):>9.2f}{report.precision(label):>11.2f}   {detail}")


if __name__ == "__main__":
    main()
