"""How the floor's software-work classifier (lessons/software.py) was checked and its threshold chosen.

For every evaluation set and the three files of off-topic probes against each set's store, each query is searched
with the classifier off: whether the margins pass it and the rank of its lesson. Then, on the data the
classifier trains on (the tuning halves of sets 1, 2 and 4 and of the first probes):

- out-of-fold scores (5 folds by a hash of the text; each text scored by a model trained without it), and
  per threshold how many off-topic tasks (and probe runs) are still answered and how many on-topic tasks
  found in the first five are lost; the thresholds with none lost and the fewest answered form a band, and
  the current default stays when it lies in it (else the loosest of the band is taken);
- with one set left out of training at a time, how many of that set's on-topic tasks score below the
  threshold (does it carry to domains it has not seen?);

and, on everything held out (those sets' held-out halves; sets 3 and 5 and the second and third probes
whole), the same counts with no classifier and with the shipped one at LESSONBOARD_RETRIEVAL_FLOOR_SOFTWARE_MIN,
per set, kind and group. One local model's classifier (its retrieval defaults and its own threshold):

    .venv/bin/python bench/bench_floor_classifier.py [--model use|e5|minilm]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
from typing import Any

import bench_retrieval_eval as bre  # sets up its own database
import numpy as np
from django.conf import settings

from lessons import embeddings, evaluation, retrieval, software, software_training

SETS = {
    "set 1": bre.EVAL,
    "set 2": bre.EVAL_2,
    "set 3": bre.EVAL_3,
    "set 4": bre.EVAL_4,
    "set 5": bre.EVAL_5,
    "set 6": bre.EVAL_6,
}
HELD_WHOLE = {"set 3", "set 5", "set 6"}  # written to be held out whole: never trains the classifier
THRESHOLDS = (-2.0, -1.75, -1.5, -1.25, -1.0, -0.75, -0.5, -0.25, 0.0)


def collect() -> dict[str, list[dict[str, Any]]]:
    """Per set: each query's and each probe's margin verdict (classifier off), rank and unit vector."""
    probes = [
        *({**p, "probe": 1} for p in evaluation.load(bre.PROBES).queries),
        *({**p, "probe": 2, "split": "heldout"} for p in evaluation.load(bre.PROBES_2).queries),
        *({**p, "probe": 3, "split": "heldout"} for p in evaluation.load(bre.PROBES_3).queries),
    ]
    provider = embeddings.provider()
    assert provider is not None
    configured = settings.RETRIEVAL_FLOOR_SOFTWARE_MIN
    settings.RETRIEVAL_FLOOR_SOFTWARE_MIN = -100.0  # the margins alone
    out: dict[str, list[dict[str, Any]]] = {}
    for name, path in SETS.items():
        data = evaluation.load(path)
        ids = bre.load_set(data)
        rows = []
        for query in [*data.queries, *probes]:
            top = [h.lesson.pk for h in retrieval.search(query["query"], k=10, floor=False).hits]
            relevant = {ids[x] for x in query["relevant"]}
            rank = next((i for i, pk in enumerate(top) if pk in relevant), None)
            vector = np.asarray(provider.embed_query(query["query"]), dtype=np.float32)
            rows.append(
                {
                    "text": query["query"],
                    "kind": "off-topic" if not query["relevant"] else evaluation.kind_of(query),
                    "probe": query.get("probe", 0),
                    "group": query.get("group", ""),
                    "half": "heldout" if name in HELD_WHOLE and not query.get("probe") else evaluation.split_of(query),
                    "passed": bool(retrieval.search(query["query"], k=10).hits),
                    "found": rank is not None and rank < 5,
                    "vector": vector / np.linalg.norm(vector),
                }
            )
        out[name] = rows
    settings.RETRIEVAL_FLOOR_SOFTWARE_MIN = configured
    return out


def counts(rows: dict[str, list[dict[str, Any]]], halves: set[str], keep: Any) -> tuple[int, int, int]:
    """(off-topic tasks and probe runs answered, on-topic tasks found in the first five, on-topic tasks)."""
    answered = found = on = 0
    for set_rows in rows.values():
        for row in set_rows:
            if row["half"] not in halves:
                continue
            passed = row["passed"] and keep(row)
            if row["kind"] == "off-topic":
                answered += passed
            else:
                on += 1
                found += passed and row["found"]
    return answered, found, on


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("use", "e5", "minilm"), default="use")
    args = parser.parse_args()
    bre.use_model(args.model)
    settings.EMBEDDING_E5_ENGINE = "onnx"  # the engine the e5 classifier is trained for
    provider = embeddings.provider()
    assert provider is not None
    rows = collect()
    texts, x, labels = software_training.training_data(provider)
    y = np.asarray(labels)
    fold = np.array([int(hashlib.sha256(t.encode()).hexdigest(), 16) % 5 for t in texts])
    oof = np.zeros(len(texts))
    for f in range(5):
        w, b = software_training.fit(x[fold != f], y[fold != f])
        oof[fold == f] = x[fold == f] @ w + b
    score_of = dict(zip(texts, oof, strict=True))
    # A tuning task left out of training (a near copy of a held-out one) is scored by the model trained on
    # everything else: it never saw that task either.
    w_all, b_all = software_training.fit(x, y)
    for set_rows in rows.values():
        for row in set_rows:
            score_of.setdefault(row["text"], float(row["vector"] @ w_all + b_all))
    auc = float((oof[y == 1][:, None] > oof[y == 0][None, :]).mean())
    print(f"{provider.model_id}, threshold {settings.RETRIEVAL_FLOOR_SOFTWARE_MIN}")
    print(f"training: {len(texts)} texts ({int(y.sum())} software work); out-of-fold AUC {auc:.4f}")
    trained = {"tune"}
    base = counts(rows, trained, lambda row: True)
    print(f"tuning data, no classifier: off-topic answered {base[0]}, on-topic found {base[1]} of {base[2]}")
    print("threshold | off-topic answered | on-topic lost (out-of-fold scores)")
    for t in THRESHOLDS:
        c = counts(rows, trained, lambda row, t=t: score_of[row["text"]] >= t)
        print(f"  {t:+.2f}   | {c[0]:>4} | {base[1] - c[1]:>3}")
    threshold = settings.RETRIEVAL_FLOOR_SOFTWARE_MIN
    print(f"\nleft-out sets (on-topic tasks below {threshold} when trained without that set):")
    by_set = {
        name: {row["text"] for row in set_rows if row["half"] in trained and not row["probe"]}
        for name, set_rows in rows.items()
        if name not in HELD_WHOLE
    }
    for name, own in by_set.items():
        others = set().union(*(v for k, v in by_set.items() if k != name)) - own
        keep = np.array([t not in own or t in others for t in texts])
        w, b = software_training.fit(x[keep], y[keep])
        on_topic = [
            row for row in rows[name] if row["half"] in trained and not row["probe"] and row["kind"] != "off-topic"
        ]
        below = sum(1 for row in on_topic if float(row["vector"] @ w + b) < threshold)
        print(f"  {name}: {below} of {len(on_topic)}")
    shipped = software.weights(provider.model_id)
    assert shipped is not None
    print(
        f"\nheld out (halves; sets 3, 5, 6, the second and third probes whole): no classifier | shipped at {threshold}"
    )
    for name, set_rows in rows.items():
        groups: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for row in set_rows:
            if row["half"] == "heldout":
                if row["probe"]:
                    groups[f"probes {row['probe']} {row['group']}"].append(row)
                else:
                    groups[f"{name} {row['kind']} {row['group']}".rstrip()].append(row)
        for label, group in sorted(groups.items()):

            def kept(row: dict[str, Any], on: bool) -> bool:
                score = float(row["vector"] @ shipped[0] + shipped[1])
                return row["passed"] and (not on or score >= threshold)

            if group[0]["kind"] == "off-topic":
                cells = [sum(1 for r in group if not kept(r, on)) for on in (False, True)]
                what = "with no lesson"
            else:
                cells = [sum(1 for r in group if kept(r, on) and r["found"]) for on in (False, True)]
                what = "found in the first five"
            print(f"  {name} store, {label} ({len(group)}), {what}: {cells[0]} | {cells[1]}")


if __name__ == "__main__":
    main()
