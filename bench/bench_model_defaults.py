"""Choosing a bundled model's retrieval defaults — fusion and floor — on the tuning halves of sets 1, 2, 4
and 5 and of the first off-topic probes (against every store), and reporting them per kind on the held-out
halves (set 3 is held out whole; the second and third probes are held out whole).

Each branch runs once per task (depth 50, ``bench_retrieval_fusion.query_rows``); fusions and floors are
then replayed from the stored rankings and floor inputs:

- fusion: reciprocal-rank fusion over a grid of text and tag weights (the text weight raised when the best
  full-text hit has the task's rare identifiers) and score fusion (cosine + λ × the share of the task's idf
  mass a lesson's terms cover, λ_exact for rare identifiers, + μ × shared tags). Admissible: on every tuning
  half, no kind's R@5 below that kind's best single branch there. Among those, the best mean R@5 (then MRR)
  over every (set, kind) of the tuning halves.
- floor: it passes when the best lesson's cosine − the closest everyday sentence's ≥ ``margin``, or ≥
  ``margin_agree`` when the branches agree, or always when they agree and the best full-text hit has the
  task's rare identifiers; then the software-work classifier vetoes a score below ``software_min``. Loss on
  the tuning halves: on-topic tasks emptied + 3 × off-topic tasks and probe runs answered (the rule the
  ``use`` floor was chosen by); ties go to the looser margins.

Prints the search, then the chosen defaults beside today's per set, half and kind (R@1 / R@5 / MRR), the
off-topic tasks per group and the probes answered with nothing. Picks nothing by itself: docs/lessons.md
records what was taken.

    .venv/bin/python bench/bench_model_defaults.py --model e5|minilm|use
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable
from typing import Any

import bench_lessons_db

bench_lessons_db.setup("lessonboard_bench_eval")

import bench_retrieval_eval as bre  # noqa: E402
import bench_retrieval_fusion as brf  # noqa: E402
from django.conf import settings  # noqa: E402

from lessons import evaluation, retrieval  # noqa: E402

SETS = {"set 1": bre.EVAL, "set 2": bre.EVAL_2, "set 3": bre.EVAL_3, "set 4": bre.EVAL_4, "set 5": bre.EVAL_5}
HELD_WHOLE = {"set 3"}  # no tuning half: nothing is chosen on it
Ranker = Callable[[dict[str, Any]], list[int]]


def half_of(set_name: str, query: dict[str, Any]) -> str:
    if query.get("probe", 1) in (2, 3) or set_name in HELD_WHOLE:
        return "heldout"
    return evaluation.split_of(query)


def collect() -> dict[str, dict[str, Any]]:
    """Per set: its data, lesson ids, and the stored rows of its queries and of every probe against it."""
    probes = [
        *({**p, "probe": 1} for p in evaluation.load(bre.PROBES).queries),
        *({**p, "probe": 2} for p in evaluation.load(bre.PROBES_2).queries),
        *({**p, "probe": 3} for p in evaluation.load(bre.PROBES_3).queries),
    ]
    out = {}
    for name, path in SETS.items():
        data = evaluation.load(path)
        ids, rows = brf.collect(data)
        rows.update(brf.query_rows(probes))
        out[name] = {"data": data, "ids": ids, "rows": rows, "probes": probes}
    return out


def fusions() -> dict[str, Ranker]:
    candidates: dict[str, Ranker] = {
        "text only": lambda r: [pk for pk, _ in r["text"]],
        "vector only": lambda r: [pk for pk, _ in r["vector"]],
        "tags only": lambda r: [pk for pk, _ in r["tags"]],
    }
    for wt, wg, depth in itertools.product((0.02, 0.1, 0.25, 0.5, 1.0), (0.0, 0.1, 0.25), (20, 50)):
        candidates[f"rrf text={wt} tags={wg} depth={depth}"] = lambda r, wt=wt, wg=wg, d=depth: brf.rrf(
            r, wt, 1.0, wg, d
        )
    for lo, hi, wg, depth in itertools.product((0.1, 0.25, 0.5), (1.0, 1.5, 3.0), (0.0, 0.1), (20, 50)):
        candidates[f"rrf text={lo} exact={hi} tags={wg} depth={depth}"] = lambda r, lo=lo, hi=hi, wg=wg, d=depth: (
            brf.adaptive(r, lo, hi, wg, settings.RETRIEVAL_EXACT_MIN_IDF, d)
        )
    for lam, lam_exact, mu in itertools.product(
        (0.01, 0.02, 0.05, 0.1, 0.2, 0.5), (0.05, 0.1, 0.2, 0.5, 1.0, 1.5), (0.0, 0.01, 0.02, 0.05)
    ):
        if lam_exact < lam:
            continue
        candidates[f"score text={lam} exact={lam_exact} tags={mu} depth=50"] = lambda r, lam=lam, le=lam_exact, mu=mu: (
            brf.score_fusion(r, lam, mu, 50, le, settings.RETRIEVAL_EXACT_MIN_IDF)
        )
    return candidates


def per_kind(store: dict[str, Any], ranker: Ranker, half: str, set_name: str) -> dict[str, evaluation.Metrics]:
    """R@1 / R@5 / MRR per on-topic kind of ``half`` (set 3's whole set is its held-out half)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for query in store["data"].queries:
        if query["relevant"] and half_of(set_name, query) == half:
            groups.setdefault(evaluation.kind_of(query), []).append(query)
    rows = store["rows"]
    return {
        kind: evaluation.measure(
            evaluation.EvalSet(store["data"].lessons, queries), store["ids"], lambda q: ranker(rows[q])
        )
        for kind, queries in sorted(groups.items())
    }


def features(row: dict[str, Any]) -> dict[str, float]:
    f = retrieval.floor_features(row["vector"], row["detail"], row["terms"], row["floor"])
    f["identifiers"] = float(f["agree"] > 0 and retrieval.rare_exact(row["detail"], settings.RETRIEVAL_EXACT_MIN_IDF))
    software = (row["floor"] or {}).get("software_score")
    f["software"] = 100.0 if software is None else float(software)
    return f


def passes(f: dict[str, float], margin: float, agree: float, software_min: float, slide: float = 0.0) -> bool:
    """The floor's rule (``retrieval.floor_check``), the gap slid by ``slide`` × the clipped software score."""
    gap = f["gap"] + slide * max(min(f["software"], 5.0), -5.0)
    ok = gap >= margin or (f["agree"] > 0 and gap >= min(margin, agree)) or f["identifiers"] > 0
    return ok and f["software"] >= software_min


def floor_rows(collected: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every task and probe run: set, half, kind (off-topic or the on-topic kind), group and features."""
    out = []
    for set_name, store in collected.items():
        for query in [*store["data"].queries, *store["probes"]]:
            row = store["rows"][query["query"]]
            out.append(
                {
                    "set": set_name,
                    "half": half_of(set_name, query),
                    "kind": "off-topic" if not query["relevant"] else evaluation.kind_of(query),
                    "probe": query.get("probe", 0),
                    "group": query.get("group", ""),
                    "f": features(row),
                }
            )
    return out


def floor_counts(rows: list[dict[str, Any]], half: str, rule: Callable[[dict[str, float]], bool]) -> tuple[int, int]:
    """(on-topic tasks emptied, off-topic tasks and probe runs answered) on ``half``."""
    emptied = answered = 0
    for row in rows:
        if row["half"] != half:
            continue
        ok = rule(row["f"])
        if row["kind"] == "off-topic":
            answered += ok
        else:
            emptied += not ok
    return emptied, answered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("use", "e5", "minilm"), default="e5")
    args = parser.parse_args()
    bre.use_model(args.model)
    today_defaults = dict(settings.LESSONS_MODEL_DEFAULTS[args.model])
    collected = collect()
    tuned = [name for name in SETS if name not in HELD_WHOLE]

    # --- fusion ---
    candidates = fusions()
    singles = ["text only", "vector only", "tags only"]
    tune = {name: {s: per_kind(collected[s], fn, "tune", s) for s in tuned} for name, fn in candidates.items()}
    best_single = {
        s: {k: max(tune[x][s][k].recall_at_5 for x in singles) for k in tune["vector only"][s]} for s in tuned
    }

    def shortfall(name: str) -> float:
        return sum(max(0.0, best_single[s][k] - m.recall_at_5) for s in tuned for k, m in tune[name][s].items())

    def merit(name: str) -> tuple[float, float]:
        cells = [m for s in tuned for m in tune[name][s].values()]
        return (round(sum(m.recall_at_5 for m in cells) / len(cells), 6), sum(m.mrr for m in cells) / len(cells))

    fused = [name for name in candidates if name not in singles]
    admissible = [name for name in fused if shortfall(name) < 1e-9]
    print(
        f"\n{args.model}: {len(admissible)} of {len(fused)} fusions keep every kind of every tuning half at its best single branch"
    )
    ranked = sorted(fused, key=lambda n: (-round(shortfall(n), 6), merit(n)), reverse=True)
    for name in ranked[:10]:
        print(f"  shortfall {shortfall(name):.3f}  R@5 {merit(name)[0]:.3f}  MRR {merit(name)[1]:.3f}  {name}")
    if today_defaults["fusion"] == "score":
        today_fusion = (
            f"score text={today_defaults['weight_text']} exact={today_defaults['weight_text_exact']} "
            f"tags={today_defaults['weight_tags']} depth=50"
        )
    else:
        today_fusion = f"rrf text={today_defaults['weight_text']} tags={today_defaults['weight_tags']} depth={today_defaults['depth']}"
    if today_fusion in candidates:
        print(f"  today: shortfall {shortfall(today_fusion):.3f}  R@5 {merit(today_fusion)[0]:.3f}  {today_fusion}")
    chosen_fusion = ranked[0]

    # --- floor ---
    rows = floor_rows(collected)
    grid = []
    for margin, agree, software_min in itertools.product(
        [m / 100 for m in range(-10, 3)], [m / 100 for m in range(-12, 3)], [t / 4 for t in range(-10, 3)]
    ):
        if agree > margin:
            continue
        rule = lambda f, m=margin, a=agree, t=software_min: passes(f, m, a, t)  # noqa: E731
        emptied, answered = floor_counts(rows, "tune", rule)
        # Ties: the looser margins, then the looser threshold (empty less on data nobody tuned on).
        grid.append(
            (emptied + 3 * answered, margin, agree, software_min, emptied, answered, margin, agree, software_min)
        )
    grid.sort()
    print("\nfloor, tuning halves (on-topic emptied + 3 × off-topic answered):")
    for loss, *_, emptied, answered, margin, agree, software_min in grid[:10]:
        print(
            f"  loss {loss:3d} ({emptied} emptied, {answered} answered)  margin {margin} agree {agree} software_min {software_min}"
        )
    today_rule = (
        today_defaults["floor_margin"],
        today_defaults.get("floor_margin_agree", today_defaults["floor_margin"]),
        today_defaults.get("software_min", -100.0),
        today_defaults.get("floor_software_slide", 0.0),
    )
    emptied, answered = floor_counts(rows, "tune", lambda f: passes(f, *today_rule))
    print(f"  today: loss {emptied + 3 * answered} ({emptied} emptied, {answered} answered)  {today_rule}")
    chosen_rule = grid[0][-3:]
    configs = {"today": (today_fusion, today_rule), "chosen": (chosen_fusion, chosen_rule)}
    configs["chosen floor"] = (today_fusion, chosen_rule)  # the floor alone changed
    report(collected, rows, candidates, configs)


def report(
    collected: dict[str, dict[str, Any]],
    rows: list[dict[str, Any]],
    candidates: dict[str, Ranker],
    configs: dict[str, tuple[str, tuple[float, ...]]],
) -> None:
    print("\n" + "; ".join(f"{label}: {fusion}, floor {rule}" for label, (fusion, rule) in configs.items()))
    for set_name, store in collected.items():
        for half in ("tune", "heldout"):
            # The floor empties a task's answer: its ranking counts as nothing.
            lines = []
            for label, (fusion, rule) in configs.items():
                verdict = {id(r): passes(features(r), *rule) for r in store["rows"].values()}
                for floor_on in (False, True):
                    ranker: Ranker = candidates[fusion]
                    gated = (lambda r, rk=ranker, v=verdict: rk(r) if v[id(r)] else []) if floor_on else ranker
                    cells = per_kind(store, gated, half, set_name)
                    if cells:
                        lines.append(
                            f"    {label + (' + floor' if floor_on else ''):<22}"
                            + " | ".join(
                                f"{k} {m.recall_at_1:.2f}/{m.recall_at_5:.2f}/{m.mrr:.2f}" for k, m in cells.items()
                            )
                        )
            for name in ("text only", "vector only"):
                cells = per_kind(store, candidates[name], half, set_name)
                if cells:
                    lines.append(
                        f"    {name:<22}"
                        + " | ".join(
                            f"{k} {m.recall_at_1:.2f}/{m.recall_at_5:.2f}/{m.mrr:.2f}" for k, m in cells.items()
                        )
                    )
            if lines:
                print(f"\n  {set_name}, {half}: R@1/R@5/MRR per kind")
                print("\n".join(lines))
            off = [r for r in rows if r["set"] == set_name and r["half"] == half and r["kind"] == "off-topic"]
            if off:
                groups = sorted({(r["probe"], r["group"]) for r in off})
                cells = []
                for probe, group in groups:
                    mine = [r for r in off if (r["probe"], r["group"]) == (probe, group)]
                    counts = "/".join(
                        str(sum(1 for r in mine if not passes(r["f"], *rule))) for _, (_, rule) in configs.items()
                    )
                    label = f"probes {probe}" if probe else "set"
                    cells.append(f"{label} {group or 'off-topic'} {counts} of {len(mine)}")
                print(f"    off-topic with no lesson ({' / '.join(configs)}): " + ", ".join(cells))


if __name__ == "__main__":
    main()
