"""Retrieval evaluation on a JSONL set of lessons and queries (``tests/data/retrieval_eval.jsonl``).

Each line is ``{"kind": "lesson", "id", "situation", "mistake", "correction", "tags", "trigger"}`` or
``{"kind": "query", "id", "query", "relevant": [lesson ids]}``. Used by the recall test and by
``bench/bench_retrieval_eval.py`` (which also picks the default model and branch weights).

Queries may carry ``type``: ``next-task`` (a concrete task in its own words whose lesson states the
situation generally; ``split`` is ``tune`` or ``heldout``, ``lang`` ``en``/``pt``; ``batch`` 2 marks the
60 added later, written before any tuning on them and split by a hash of their id) or ``off-topic``
(``relevant`` is empty: the right answer is no lesson). Queries without ``type`` are the original set
(paraphrases, identifiers, cross-lingual twins). ``batch`` 3 adds ``identifier`` queries (an error code,
flag, path or config key in the task) and ``near-twin`` queries (the task fits two lessons told apart by one
detail), with their lessons. ``tests/data/retrieval_eval_2.jsonl`` is a second set written from scratch
(other domains, terser notes) with ``identifier``, ``near-twin``, ``next-task``, ``paraphrase`` and
``off-topic`` queries; ``retrieval_eval_3.jsonl``, ``retrieval_eval_4.jsonl`` and ``retrieval_eval_5.jsonl``
were written blind (by authors who saw neither the code nor the other sets; set 5's off-topic queries have a
``group``: ``everyday``, ``user-computing`` or ``software-elsewhere``, software work no lesson of the set
touches), and ``retrieval_offtopic_probes.jsonl``, ``_2`` and ``_3`` hold off-topic
queries only, each with a ``group`` (``everyday`` or ``user-computing``), run against every set's store. A
query's half is its ``split`` (``heldout-2`` counts as held out) or, for the
original queries that have none, a hash of its id (``split_of``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lessons.store import persist_lesson


@dataclass
class EvalSet:
    lessons: list[dict[str, Any]]
    queries: list[dict[str, Any]]


@dataclass
class Metrics:
    recall_at_1: float
    recall_at_5: float
    mrr: float

    def line(self, label: str) -> str:
        return f"{label:<14} recall@1={self.recall_at_1:.3f} recall@5={self.recall_at_5:.3f} MRR={self.mrr:.3f}"


def load(path: Path) -> EvalSet:
    lessons: list[dict[str, Any]] = []
    queries: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            (lessons if row["kind"] == "lesson" else queries).append(row)
    return EvalSet(lessons, queries)


def subset(
    eval_set: EvalSet, *, query_type: str | None = None, split: str | None = None, batch: int | None = None
) -> EvalSet:
    """The queries of one ``type`` (``"original"`` for those without one) and, optionally, one ``split``
    and one ``batch`` (1 for queries without one)."""
    queries = [
        q
        for q in eval_set.queries
        if (query_type is None or q.get("type", "original") == query_type)
        and (split is None or q.get("split") == split)
        and (batch is None or q.get("batch", 1) == batch)
    ]
    return EvalSet(eval_set.lessons, queries)


def split_of(query: dict[str, Any]) -> str:
    """``tune`` or ``heldout``: the query's own split, else by a hash of its id (deterministic)."""
    split = query.get("split")
    if split:
        return "tune" if split == "tune" else "heldout"
    return "tune" if hashlib.sha256(query["id"].encode()).digest()[0] % 2 == 0 else "heldout"


def kind_of(query: dict[str, Any]) -> str:
    return str(query.get("type", "original"))


def by_kind_and_half(eval_set: EvalSet) -> dict[tuple[str, str], EvalSet]:
    """The set's queries grouped by (kind, half)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for query in eval_set.queries:
        groups.setdefault((kind_of(query), split_of(query)), []).append(query)
    return {key: EvalSet(eval_set.lessons, queries) for key, queries in sorted(groups.items())}


def store(eval_set: EvalSet) -> dict[str, int]:
    """Persist the set's lessons through the store; returns eval id → lesson pk."""
    ids: dict[str, int] = {}
    for row in eval_set.lessons:
        result = persist_lesson(
            situation=row["situation"],
            mistake=row["mistake"],
            correction=row["correction"],
            tags=row["tags"],
            trigger=row["trigger"],
            actor="eval",
        )
        ids[row["id"]] = result.lesson.pk
    return ids


def measure(eval_set: EvalSet, ids: dict[str, int], ranked: Callable[[str], list[int]]) -> Metrics:
    """``ranked(query)`` → lesson pks best first. Recall@k counts the share of a query's relevant lessons
    in its top k, averaged over queries; MRR uses the first relevant lesson's rank. Off-topic queries
    (no relevant lesson) are left out: ``empty_answers`` measures those."""
    r1 = r5 = rr = 0.0
    queries = [q for q in eval_set.queries if q["relevant"]]
    for query in queries:
        relevant = {ids[i] for i in query["relevant"]}
        got = ranked(query["query"])
        r1 += len(relevant & set(got[:1])) / min(len(relevant), 1)
        r5 += len(relevant & set(got[:5])) / len(relevant)
        rank = next((n for n, pk in enumerate(got, start=1) if pk in relevant), None)
        rr += 1.0 / rank if rank else 0.0
    n = max(len(queries), 1)
    return Metrics(r1 / n, r5 / n, rr / n)


def empty_answers(eval_set: EvalSet, ranked: Callable[[str], list[int]]) -> tuple[int, int]:
    """(queries answered with no lesson, queries) over the set's off-topic queries."""
    off_topic = [q for q in eval_set.queries if not q["relevant"]]
    return sum(1 for q in off_topic if not ranked(q["query"])), len(off_topic)
