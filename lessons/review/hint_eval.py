"""Measuring the proposal page's hints (``lessons.review.nearest.flag_for``) on a labelled set of pairs:
per label, how often the hint says it (recall) and how often a hint is right (precision)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lessons.review.nearest import flag_for, similarity

LABELS = ("duplicate", "near duplicate", "contradiction", "related", "unrelated")
FLAG_TO_LABEL = {"possible contradiction": "contradiction"}
FLOOR = 0.1  # nearest() shows nothing under this similarity: "unrelated"


@dataclass
class HintReport:
    confusion: Counter[tuple[str, str]]  # (label, predicted) → count

    def recall(self, label: str) -> float:
        total = sum(n for (truth, _), n in self.confusion.items() if truth == label)
        return self.confusion[(label, label)] / total if total else 0.0

    def precision(self, label: str) -> float:
        total = sum(n for (_, said), n in self.confusion.items() if said == label)
        return self.confusion[(label, label)] / total if total else 1.0


def predict(a: str, b: str) -> str:
    score = similarity(a, b)
    if score < FLOOR and a.strip() != b.strip():
        return "unrelated"
    flag = flag_for(a, b, score)
    return FLAG_TO_LABEL.get(flag, flag)


def evaluate(path: Path) -> HintReport:
    confusion: Counter[tuple[str, str]] = Counter()
    for line in path.read_text().splitlines():
        if line.strip():
            pair = json.loads(line)
            confusion[(pair["label"], predict(pair["a"], pair["b"]))] += 1
    return HintReport(confusion)
