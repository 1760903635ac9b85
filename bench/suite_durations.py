"""Where the test suite's time goes: a pytest ``--durations=0`` report, grouped by file and by phase.

    python3 lb.py test --durations=0 -p no:cacheprovider > /tmp/run.log
    .venv/bin/python bench/suite_durations.py /tmp/run.log [--top 25]

Prints the files by total seconds (setup, where the fixtures' time lands, beside call), the share of the
whole, and the slowest single phases. With xdist the durations add up to more than the run's wall time:
they are per test, across both workers.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+?)::(\S+)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--write-slow",
        type=Path,
        metavar="FILE",
        help="write the test functions whose setup+call+teardown took at least --slow-seconds (the slowest"
        " parametrisation counts) to FILE, the list tests/conftest.py marks `slow` (left out of --quick)",
    )
    parser.add_argument("--slow-seconds", type=float, default=2.0)
    args = parser.parse_args()
    by_file: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    tests_per_file: dict[str, set[str]] = defaultdict(set)
    phases: list[tuple[float, str, str]] = []
    for line in args.log.read_text(errors="replace").splitlines():
        if match := LINE.match(line.strip()):
            seconds, phase, path, test = float(match.group(1)), match.group(2), match.group(3), match.group(4)
            by_file[path][phase] += seconds
            tests_per_file[path].add(test)
            phases.append((seconds, phase, f"{path}::{test}"))
    total = sum(sum(p.values()) for p in by_file.values())
    if not total:
        raise SystemExit(f"{args.log}: no --durations=0 lines found")
    if args.write_slow:
        write_slow(args.write_slow, phases, args.slow_seconds, args.log)
    print(f"{'file':58} {'tests':>5} {'setup s':>8} {'call s':>8} {'total s':>8} {'share':>6}")
    ranked = sorted(by_file.items(), key=lambda item: -sum(item[1].values()))
    for path, p in ranked[: args.top]:
        whole = sum(p.values())
        print(
            f"{path[:58]:58} {len(tests_per_file[path]):5d} {p['setup']:8.1f} {p['call']:8.1f} {whole:8.1f}"
            f" {whole / total:6.1%}"
        )
    by_folder: dict[str, float] = defaultdict(float)
    for path, p in by_file.items():
        by_folder["/".join(path.split("/")[:2])] += sum(p.values())
    print(f"\nall: {total:.1f} s over {sum(len(t) for t in tests_per_file.values())} tests")
    print("by folder: " + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(by_folder.items(), key=lambda kv: -kv[1])))
    setup = sum(p["setup"] for p in by_file.values())
    print(
        f"setup (fixtures) {setup:.1f} s = {setup / total:.0%}; call {sum(p['call'] for p in by_file.values()):.1f} s"
    )
    print("\nslowest phases:")
    for seconds, phase, name in sorted(phases, reverse=True)[:10]:
        print(f"  {seconds:7.2f} s {phase:8} {name}")


def write_slow(target: Path, phases: list[tuple[float, str, str]], threshold: float, log: Path) -> None:
    per_test: dict[str, float] = defaultdict(float)
    for seconds, _, name in phases:
        per_test[name] += seconds
    per_function: dict[str, float] = defaultdict(float)
    for name, seconds in per_test.items():
        function = name.split("[")[0]
        per_function[function] = max(per_function[function], seconds)
    slow = sorted(f for f, seconds in per_function.items() if seconds >= threshold)
    header = (
        "# Test functions marked `slow` by tests/conftest.py and so left out of `lb.py test --quick`\n"
        f"# (docs/testing.md#tiers). Each took at least {threshold:.1f} s (setup + call + teardown, its slowest\n"
        "# parametrisation) in the run this list was written from; the whole suite runs them all.\n"
        "# Written by: .venv/bin/python bench/suite_durations.py RUN.log --write-slow tests/slow.txt\n"
    )
    target.write_text(header + "".join(f"{name}\n" for name in slow))
    print(f"{target}: {len(slow)} slow test functions (>= {threshold:.1f} s in {log})")


if __name__ == "__main__":
    main()
