"""The retrieval floor's rule for ``use``, chosen and checked per set, half and kind of input: the sliding
margin taken, the rule before it, and a learned floor tried beside them.

Rows: every task of sets 1–7 and every off-topic probe (first, second, third file) against every store; the
tuning halves of sets 1, 2, 4 and 5 and of the first probes; held out: the other halves, sets 3, 6 and 7
whole, the second and third probes whole (``bench_model_defaults``). A cell is a set × on-topic kind (the
count: tasks the floor empties) or a set × off-topic group and probe file (the count: tasks answered).

1. **The sliding margin** (``retrieval.software_slide``): the floor passes when the gap (best lesson − closest
   everyday sentence) + ``slide`` × the software-work score (clipped to −5…5) clears ``margin`` (``agree`` when
   the branches agree), or the branches agree on the task's rare identifiers; then the classifier's veto
   below ``software_min``. The grid (slide 0…0.05, margin −0.10…0.04, agree −0.12…0.04, software_min
   −2.5…0.5) on the tuning halves: loss = on-topic emptied + 3 × off-topic answered; admissible when no
   tuning cell is worse than the rule before. Printed: the lowest-loss admissible rules with their
   held-out totals and every held-out cell worse than before (sets 1–6: how the rule was chosen, those
   halves seen), then the rule before against today's on every cell of set 7, which was written after the
   choice (its confirmation).
2. **A learned floor**: a weighted logistic regression over ``retrieval.floor_features`` and the classifier's
   score (off-topic rows weigh 3, as in the loss; features standardised on the tuning rows; plain gradient
   descent from zero, deterministic), for a small menu of feature sets and L2 weights, thresholded at the
   lowest tuning loss that empties no more tuning on-topic tasks than the rule before. Tried, not taken
   (docs/lessons.md#floor).

Picks nothing by itself: docs/lessons.md records what was taken.

    .venv/bin/python bench/bench_floor_rules.py
"""

from __future__ import annotations

import itertools
from typing import Any

import bench_model_defaults as bmd  # first: it sets up Django and the bench database
import bench_retrieval_eval as bre
import numpy as np
from django.conf import settings

from lessons import evaluation

BEFORE = (-0.02, -0.04, -1.25, 0.0)  # margin, agree, software_min, slide: use's rule before the slide
FEATURES = ("gap", "cover", "exact", "agree", "margin", "software")
MENU = (FEATURES, ("gap", "cover", "agree", "software"), ("gap", "cover", "software"), ("gap", "software"))
OFF_WEIGHT = 3.0

Cells = dict[tuple[str, str], int]


def today() -> tuple[float, float, float, float]:
    return (
        settings.RETRIEVAL_FLOOR_MARGIN,
        settings.RETRIEVAL_FLOOR_MARGIN_AGREE,
        settings.RETRIEVAL_FLOOR_SOFTWARE_MIN,
        settings.RETRIEVAL_FLOOR_SOFTWARE_SLIDE,
    )


def rows_of(collected: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for set_name, store in collected.items():
        for query in [*store["data"].queries, *store["probes"]]:
            off = not query["relevant"]
            probe = query.get("probe", 0)
            group = (query.get("group") or "task") + (f" (probes {probe})" if probe else "")
            out.append(
                {
                    "half": bmd.half_of(set_name, query),
                    "off": off,
                    "cell": (set_name, f"off-topic {group}" if off else evaluation.kind_of(query)),
                    "f": bmd.features(store["rows"][query["query"]]),
                }
            )
    return out


def counts(rows: list[dict[str, Any]], served: Any) -> Cells:
    """Per cell: on-topic tasks emptied, or off-topic tasks answered."""
    out: Cells = {}
    for row, ok in zip(rows, served, strict=True):
        out[row["cell"]] = out.get(row["cell"], 0) + int(bool(ok) if row["off"] else not ok)
    return out


def by_rule(rows: list[dict[str, Any]], rule: tuple[float, ...]) -> Cells:
    return counts(rows, [bmd.passes(r["f"], *rule) for r in rows])


def totals(cells: Cells) -> tuple[int, int]:
    emptied = sum(n for (_, kind), n in cells.items() if not kind.startswith("off-topic"))
    return emptied, sum(cells.values()) - emptied


def worse(cells: Cells, before: Cells) -> dict[str, str]:
    return {
        f"{s} {k}": f"{before.get((s, k), 0)} -> {n}"
        for (s, k), n in sorted(cells.items())
        if n > before.get((s, k), 0)
    }


def sliding_margin(tune: list[dict[str, Any]], held: list[dict[str, Any]]) -> None:
    before_tune, before_held = by_rule(tune, BEFORE), by_rule(held, BEFORE)
    developed = [r for r in held if r["cell"][0] != "set 7"]
    before_developed = by_rule(developed, BEFORE)
    grid = []
    for slide, margin, agree, software_min in itertools.product(
        [s / 200 for s in range(11)],
        [m / 100 for m in range(-10, 5)],
        [a / 100 for a in range(-12, 5)],
        [t / 4 for t in range(-10, 3)],
    ):
        if agree > margin:
            continue
        rule = (margin, agree, software_min, slide)
        cells = by_rule(tune, rule)
        emptied, answered = totals(cells)
        if all(n <= before_tune.get(cell, 0) for cell, n in cells.items()):
            grid.append((emptied + 3 * answered, rule))
    grid.sort(key=lambda g: g[0])
    best = grid[0][0]
    tied = [rule for loss, rule in grid if loss == best]
    emptied, answered = totals(before_tune)
    print(
        f"1. sliding margin: the rule before {BEFORE}: tuning loss {emptied + 3 * answered} ({emptied} emptied, {answered} answered)"
    )
    print(
        f"   {len(grid)} admissible rules; lowest loss {best}, {len(tied)} tied (margin, agree, software_min, slide):"
    )
    for rule in tied:
        cells = by_rule(developed, rule)
        print(
            f"   {rule}: held out, sets 1-6: {totals(cells)} (before {totals(before_developed)}); worse: {worse(cells, before_developed) or 'none'}"
        )
    now = today()
    print(
        f"\n   today {now} against the rule before, every held-out cell that differs (set 7 was written after the choice):"
    )
    cells = by_rule(held, now)
    for cell in sorted(set(cells) | set(before_held)):
        mine, theirs = cells.get(cell, 0), before_held.get(cell, 0)
        if mine != theirs:
            verb = "answered" if cell[1].startswith("off-topic") else "emptied"
            print(f"     {cell[0]:<6} {cell[1]:<40} {verb} {theirs} -> {mine}{'  WORSE' if mine > theirs else ''}")
    seven = [r for r in held if r["cell"][0] == "set 7"]
    print(f"   set 7: before {totals(by_rule(seven, BEFORE))}, today {totals(by_rule(seven, now))} (emptied, answered)")
    print(f"   held out in all: before {totals(before_held)}, today {totals(cells)}")


def matrix(rows: list[dict[str, Any]], names: tuple[str, ...]) -> np.ndarray:
    columns = []
    for name in names:
        values = np.array([r["f"][name] for r in rows], dtype=float)
        if name == "exact":
            values = np.minimum(values, 10.0) / 10.0  # idf sums: a few rare identifiers say as much as many
        if name == "software":
            values = np.clip(values, -5.0, 5.0) / 5.0  # no classifier: 100 (bmd.features)
        columns.append(values)
    return np.column_stack(columns)


def fit(x: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    x = np.column_stack([x, np.ones(len(x))])
    weights = np.where(y == 0, OFF_WEIGHT, 1.0)
    w = np.zeros(x.shape[1])
    for _ in range(15000):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        w -= 0.5 * (x.T @ (weights * (p - y)) / len(y) + l2 * np.r_[w[:-1], 0.0])
    return w


def learned(tune: list[dict[str, Any]], held: list[dict[str, Any]]) -> None:
    y = np.array([0.0 if r["off"] else 1.0 for r in tune])
    before_tune, before_held = by_rule(tune, BEFORE), by_rule(held, BEFORE)
    print(f"\n2. learned floor ({int(y.sum())} on-topic and {int(len(y) - y.sum())} off-topic tuning rows)")
    for names, l2 in itertools.product(MENU, (0.0, 0.01)):
        x = matrix(tune, names)
        mean, spread = x.mean(axis=0), x.std(axis=0) + 1e-9
        w = fit((x - mean) / spread, y, l2)
        scores = np.column_stack([(x - mean) / spread, np.ones(len(x))]) @ w
        held_scores = np.column_stack([(matrix(held, names) - mean) / spread, np.ones(len(held))]) @ w
        best = None
        for threshold in np.unique(scores):
            emptied, answered = totals(counts(tune, scores >= threshold))
            if emptied <= totals(before_tune)[0] and (best is None or emptied + 3 * answered < best[0]):
                best = (emptied + 3 * answered, float(threshold), emptied, answered)
        assert best is not None  # the lowest threshold serves every tuning task
        loss, threshold, emptied, answered = best
        tune_cells = counts(tune, scores >= threshold)
        admissible = all(n <= before_tune.get(cell, 0) for cell, n in tune_cells.items())
        held_cells = counts(held, held_scores >= threshold)
        print(
            f"   {'+'.join(names)}, L2 {l2}: tuning {emptied} emptied, {answered} answered (loss {loss}), "
            f"{'admissible' if admissible else 'not admissible'}; held out {totals(held_cells)} "
            f"(before {totals(before_held)}); worse than before: {worse(held_cells, before_held) or 'none'}"
        )


def main() -> None:
    bre.use_model("use")
    bmd.SETS.update({"set 6": bre.EVAL_6, "set 7": bre.EVAL_7})
    bmd.HELD_WHOLE.update({"set 6", "set 7"})
    rows = rows_of(bmd.collect())
    tune = [r for r in rows if r["half"] == "tune"]
    held = [r for r in rows if r["half"] == "heldout"]
    sliding_margin(tune, held)
    learned(tune, held)


if __name__ == "__main__":
    main()
