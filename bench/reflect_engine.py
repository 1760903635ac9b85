"""Doc reflection figures: the pure engine's throughput and git's cost on a real repository.

Run: ``.venv/bin/python bench/reflect_engine.py``. Prints figures; asserts nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lessons.reflect.engine import (
    BOOTSTRAP_FILES,
    Shortstat,
    build_manifest,
    evaluate,
    snapshot_hash,
    strip_injection_chars,
    validate,
)
from lessons.reflect.git import GitRunner

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}  # fmt: skip


def timed(label: str, repeat: int, fn: object) -> None:
    assert callable(fn)
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    elapsed = time.perf_counter() - start
    print(f"{label:<58} {elapsed / repeat * 1000:9.3f} ms/op  ({repeat} ops)")


def main() -> None:
    from datetime import UTC, datetime

    kinds = ["src/routes/r{}.js", "app/Models/M{}.php", "docs/n{}.md", "db/migrations/{}.sql", "lib/x{}/y.py"]
    paths = [kinds[i % len(kinds)].format(i) for i in range(10_000)]
    timed("evaluate 10,000 changed paths (9 regexes each)", 20, lambda: evaluate(
        changed_files=paths, shortstat=Shortstat(10_000, 50_000, 1_000), bootstrap_present=True))  # fmt: skip

    body = "---\ngenerated_at: 2024-01-01T00:00:00Z\n---\n" + ("A line of bootstrap prose. " * 2400)
    snapshot = dict.fromkeys(BOOTSTRAP_FILES, body)  # 4 × ~64 KiB
    timed("snapshot_hash of 4 × 64 KiB files", 500, lambda: snapshot_hash(snapshot))
    evaluation = evaluate(changed_files=paths[:50], shortstat=Shortstat(50, 900, 10), bootstrap_present=True)
    manifest = build_manifest(evaluation=evaluation, snapshot=snapshot, now=datetime.now(UTC))
    new = body.replace("2024-01-01T00:00:00Z", "2026-01-01T00:00:00Z") + "\nnew\n"
    files = {p: new for p in manifest["validation_rules"]["allowed_paths"]}
    timed(f"validate {len(files)} files of 64 KiB (+ current snapshot hash)", 500,
          lambda: validate(manifest=manifest, files=files, current_snapshot=snapshot))  # fmt: skip
    timed("strip_injection_chars on 64 KiB", 500, lambda: strip_injection_chars(new))

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        git = ["git", "-C", str(repo)]
        subprocess.run([*git, "init", "-q"], check=True, env=GIT_ENV)
        for commit in range(4):
            for i in range(250):
                target = repo / f"src/routes/c{commit}/f{i}.js"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(f"export const v = {commit};\n" * 20)
            subprocess.run([*git, "add", "-A"], check=True, env=GIT_ENV)
            subprocess.run([*git, "commit", "-qm", f"c{commit}"], check=True, env=GIT_ENV)
        runner = GitRunner(cwd=repo, timeout=10.0, max_output=4 * 1024 * 1024)
        timed("git diff --name-only HEAD~3..HEAD (750 files)", 20, lambda: runner.changed_files("HEAD~3..HEAD"))
        timed("git diff --shortstat HEAD~3..HEAD", 20, lambda: runner.shortstat("HEAD~3..HEAD"))
        timed("invalid range → fallback to git diff HEAD (2 git calls)", 20, lambda: runner.changed_files("nope..HEAD"))


if __name__ == "__main__":
    main()
