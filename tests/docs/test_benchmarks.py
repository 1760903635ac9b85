"""docs/benchmarks.md names a reproducing command for every benchmark script, and every benchmark the docs
mention exists."""

from __future__ import annotations

import re

from tests.docs import docset

BENCH = docset.ROOT / "bench"


def runnable_scripts() -> set[str]:
    """Benchmark scripts (not their shared set-up modules): the ones with a ``__main__`` block."""
    return {p.name for p in BENCH.glob("*.py") if '__name__ == "__main__"' in p.read_text(encoding="utf-8")}


def test_every_benchmark_script_has_its_command_in_the_benchmarks_page() -> None:
    page = (docset.DOCS / "benchmarks.md").read_text(encoding="utf-8")
    commands = set(re.findall(r"`\.venv/bin/python bench/([a-z0-9_]+\.py)[^`]*`", page))
    assert len(runnable_scripts()) >= 10
    assert sorted(runnable_scripts() - commands) == []


def test_every_benchmark_the_docs_mention_exists() -> None:
    mentioned = {
        (docset.rel(path), name)
        for path in docset.doc_files()
        for name in re.findall(
            r"\b(?:bench/)?((?:bench_|review_|reflect_)[a-z0-9_]+\.py)\b", path.read_text(encoding="utf-8")
        )
    }
    assert mentioned
    assert sorted(m for m in mentioned if not (BENCH / m[1]).exists()) == []
