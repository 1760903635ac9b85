"""The pure engine: regexes, reasons, volume rule, targets, hash vectors, manifest and the eleven checks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from lessons.reflect.engine import (
    BOOTSTRAP_FILES,
    Shortstat,
    build_manifest,
    detect_signals,
    evaluate,
    parse_shortstat,
    select_targets,
    snapshot_hash,
    strip_html_comments,
    strip_injection_chars,
    validate,
)

SIGNAL_CASES = [
    ("routes", "src/routes/api.js", True),
    ("routes", "routes/index.js", True),
    ("routes", "app/controllers/users.rb", True),
    ("routes", "api/routes.js", False),  # a directory segment is required
    ("routes", "src/Routes/x.js", False),  # case-sensitive
    ("routes", "src/myroutes/x.js", False),
    ("api", "pages/api/hello.ts", True),
    ("api", "src/app/api/route.ts", True),
    ("api", "src/apps/api/route.ts", False),
    ("api", "pages/API/hello.ts", False),
    ("models", "src/models/user.py", True),
    ("models", "db/migrations/0001.sql", True),
    ("models", "app/Models/User.php", False),  # Laravel, not "models"
    ("models", "src/models.py", False),
    ("prisma", "prisma/schema.prisma", True),
    ("prisma", "backend/prisma/schema.prisma", True),
    ("prisma", "prisma/schema.prisma.bak", False),
    ("prisma", "prisma/other.prisma", False),
    ("laravelModels", "app/Models/User.php", True),
    ("laravelModels", "app/models/User.php", False),
    ("prd", ".aioson/context/prd-checkout.md", True),
    ("prd", ".aioson/context/prd-.md", False),
    ("prd", ".aioson/context/sub/prd-x.md", False),
    ("prd", "docs/prd-checkout.md", False),
    ("requirements", ".aioson/context/requirements-auth.md", True),
    ("requirements", ".aioson/context/requirements.md", False),
    ("features", ".aioson/context/features.md", True),
    ("features", "features.md", False),  # the docs' root-level example does not match the code
    ("features", ".aioson/context/features.md.bak", False),
    ("currentState", ".aioson/context/bootstrap/current-state.md", True),
    ("currentState", ".aioson/context/bootstrap/what-is.md", False),
]


@pytest.mark.parametrize(("key", "path", "matches"), SIGNAL_CASES)
def test_it_matches_each_signal_regex_exactly(key: str, path: str, matches: bool) -> None:
    signals = detect_signals([path])
    assert bool(signals[key]) is matches


def test_it_lets_one_file_feed_several_signals() -> None:
    signals = detect_signals(["app/Models/routes/x.php"])
    assert signals["laravelModels"] == ["app/Models/routes/x.php"]
    assert signals["routes"] == ["app/Models/routes/x.php"]


def test_it_gives_reasons_in_aiosons_order_and_wording() -> None:
    paths = [
        ".aioson/context/bootstrap/current-state.md",
        ".aioson/context/features.md",
        ".aioson/context/requirements-a.md",
        ".aioson/context/prd-a.md",
        ".aioson/context/prd-b.md",
        "app/Models/A.php",
        "prisma/schema.prisma",
        "db/migrations/1.sql",
        "pages/api/x.ts",
        "src/routes/a.js",
        "src/controllers/b.js",
    ]
    result = evaluate(changed_files=paths, shortstat=Shortstat(11, 150, 50), bootstrap_present=True)
    assert result.verdict == "relevant"
    assert result.reasons == [
        "routes/controllers touched (2 files)",
        "api handlers touched (1 files)",
        "models/migrations touched (1 files)",
        "prisma/schema.prisma changed",
        "app/Models touched (1 files)",
        "prd-*.md changed (2)",
        "requirements-*.md changed (1)",
        "features.md changed",
        "bootstrap/current-state.md changed",
        "high volume: 11 files, 200 lines",
    ]


def test_it_skips_when_no_signal_matches() -> None:
    result = evaluate(changed_files=["docs/random-note.md"], shortstat=Shortstat(1, 1, 0), bootstrap_present=True)
    assert (result.verdict, result.reasons) == ("skip", [])
    assert result.as_dict()["gitRange"] == "HEAD~3..HEAD"
    assert result.as_dict()["shortstat"] == {"files": 1, "insertions": 1, "deletions": 0}


@pytest.mark.parametrize(
    ("stat", "relevant"),
    [
        (Shortstat(10, 200, 0), True),
        (Shortstat(10, 100, 100), True),
        (Shortstat(9, 300, 0), False),
        (Shortstat(10, 150, 49), False),
    ],
)
def test_it_applies_the_volume_rule_inclusively(stat: Shortstat, relevant: bool) -> None:
    result = evaluate(changed_files=["docs/x.md"], shortstat=stat, bootstrap_present=True)
    assert result.relevant is relevant


def test_it_parses_shortstat_with_missing_parts_as_zero() -> None:
    assert parse_shortstat(" 1 file changed, 1 insertion(+)\n") == Shortstat(1, 1, 0)
    assert parse_shortstat(" 3 files changed, 5 insertions(+), 2 deletions(-)") == Shortstat(3, 5, 2)
    assert parse_shortstat(" 2 files changed, 7 deletions(-)") == Shortstat(2, 0, 7)
    assert parse_shortstat("") == Shortstat(0, 0, 0)


def test_it_orders_targets_as_the_code_does() -> None:
    both = detect_signals(["src/routes/a.js", ".aioson/context/features.md"])
    assert select_targets(both) == ["how-it-works.md", "current-state.md", "what-it-does.md"]
    assert select_targets(detect_signals([".aioson/context/prd-x.md"])) == ["what-it-does.md", "current-state.md"]
    assert select_targets(detect_signals([".aioson/context/bootstrap/current-state.md"])) == ["current-state.md"]
    assert select_targets(detect_signals(["docs/x.md"])) == ["current-state.md"]


def test_it_hashes_the_snapshot_with_the_spec_vectors() -> None:
    empty = dict.fromkeys(BOOTSTRAP_FILES, "")
    assert snapshot_hash(empty) == "e40cfede9eae2a7fd5f875560197c856e0e9b105a2fbb59d290dc7895cb1e662"
    abcd = dict(zip(BOOTSTRAP_FILES, "abcd", strict=True))
    assert snapshot_hash(abcd) == "c5e93f469f0860a8e820db81648579fe4e2b4c6acdda7a312a5531fa7a582616"
    assert snapshot_hash({"what-is.md": "café"}) == ("1d6e3eb2d5c18407c638410689a1a2b219f3cb92bad12c011714e2e90629b54b")


def test_it_hashes_independently_of_key_order_but_not_of_content() -> None:
    abcd = dict(zip(BOOTSTRAP_FILES, "abcd", strict=True))
    reversed_keys = dict(reversed(list(abcd.items())))
    assert snapshot_hash(reversed_keys) == snapshot_hash(abcd)
    assert snapshot_hash({**abcd, "current-state.md": "e"}) != snapshot_hash(abcd)


def _manifest(**overrides: Any) -> dict[str, Any]:
    evaluation = evaluate(
        changed_files=["src/routes/a.js"], shortstat=Shortstat(1, 3, 1), bootstrap_present=True, agent="dev"
    )
    snapshot = {name: f"---\ngenerated_at: 2024-01-01T00:00:00Z\n---\n{name}\n" for name in BOOTSTRAP_FILES}
    manifest = build_manifest(
        evaluation=evaluation, snapshot=snapshot, now=datetime(2026, 5, 11, 14, 30, 0, 123456, tzinfo=UTC)
    )
    manifest.update(overrides)
    return manifest


def test_it_builds_a_manifest_with_every_field() -> None:
    m = _manifest()
    assert list(m) == [
        "version",
        "session_id",
        "trigger_agent",
        "git_range",
        "heuristic_verdict",
        "heuristic_reasons",
        "targets",
        "current_bootstrap_snapshot",
        "snapshot_hash",
        "diff_summary",
        "changed_files",
        "instructions",
        "validation_rules",
        "generated_at",
    ]
    assert m["version"] == 1
    assert m["session_id"] == "dev-2026-05-11T14:30:00.123Z"
    assert m["generated_at"] == "2026-05-11T14:30:00.123Z"
    assert m["trigger_agent"] == "dev"
    assert m["git_range"] == "HEAD~3..HEAD"
    assert m["heuristic_verdict"] == "relevant"
    assert m["targets"] == ["how-it-works.md", "current-state.md"]
    assert m["diff_summary"] == "1 files, +3/-1"
    assert m["snapshot_hash"] == snapshot_hash(m["current_bootstrap_snapshot"])
    assert m["validation_rules"] == {
        "must_have_frontmatter": True,
        "must_update_generated_at": True,
        "must_diff_content": True,
        "allowed_paths": [".aioson/context/bootstrap/how-it-works.md", ".aioson/context/bootstrap/current-state.md"],
    }
    assert m["instructions"] == (
        "Edit only: bootstrap/how-it-works.md, bootstrap/current-state.md. "
        "Remove obsolete entries. Add new capabilities. Preserve YAML frontmatter. "
        "Update the `generated_at` field in each touched file. "
        'In current-state.md, prefix each new entry under "## What the system already has" with '
        "`[{feature-slug} · {YYYY-MM-DD}]`. "
        "When done, write the result via `aioson memory:reflect-commit` (do not edit other files)."
    )


HOW = ".aioson/context/bootstrap/how-it-works.md"
GOOD = "---\ngenerated_at: 2026-05-12T00:00:00Z\n---\nhow-it-works.md\nmore\n"


def test_it_accepts_a_well_formed_edit() -> None:
    manifest = _manifest()
    result = validate(manifest=manifest, files={HOW: GOOD}, current_snapshot=manifest["current_bootstrap_snapshot"])
    assert (result.ok, result.errors) == (True, [])


def test_check_1_rejects_a_missing_manifest() -> None:
    assert validate(manifest=None, files={HOW: GOOD}).errors == ["manifest missing or invalid"]
    assert validate(manifest=[], files={HOW: GOOD}).errors == ["manifest missing or invalid"]


def test_check_2_rejects_files_that_are_not_an_object() -> None:
    assert validate(manifest=_manifest(), files=None).errors == ["no files to commit"]
    assert validate(manifest=_manifest(), files=["x"]).errors == ["no files to commit"]


@pytest.mark.parametrize("rules", [{"allowed_paths": []}, {}, {"allowed_paths": "x"}, None])
def test_check_3_fails_closed_without_allowed_paths(rules: Any) -> None:
    result = validate(manifest=_manifest(validation_rules=rules), files={HOW: GOOD})
    assert result.errors == ["manifest validation_rules.allowed_paths is missing or empty"]


def test_check_4_rejects_an_empty_files_map() -> None:
    assert validate(manifest=_manifest(), files={}).errors == ["files map is empty"]


@pytest.mark.parametrize("path", ["/etc/passwd", "../../../etc/passwd", "a\\..\\b", ".aioson/../x.md"])
def test_check_5_rejects_escaping_paths_even_when_allowed(path: str) -> None:
    manifest = _manifest()
    manifest["validation_rules"]["allowed_paths"].append(path)
    result = validate(manifest=manifest, files={path: GOOD})
    assert result.errors == [f"file outside allowed_paths: {path}"]


def test_check_6_rejects_a_path_not_exactly_allowed() -> None:
    result = validate(manifest=_manifest(), files={"src/sneaky.js": GOOD, "./" + HOW: GOOD})
    assert result.errors == ["file outside allowed_paths: src/sneaky.js", f"file outside allowed_paths: ./{HOW}"]


@pytest.mark.parametrize(
    ("content", "ok"),
    [
        ("---\n---\n", False),
        ("---\n\n---\n", True),
        ("  ---\nx\n---\n", False),
        ("\ufeff---\nx\n---\n", False),
        ("---\r\nx\r\n---\r\n", True),
        ("---\nx\n---x", False),
        ("---\nx\n---", True),
        ("---\ufeff\nx\n---\n", True),  # JavaScript's \s includes U+FEFF…
        ("---\x1c\nx\n---\n", False),  # …and excludes U+001C, which Python's \s includes
    ],
)
def test_check_7_requires_yaml_frontmatter(content: str, ok: bool) -> None:
    manifest = _manifest(validation_rules={"must_have_frontmatter": True, "allowed_paths": [HOW]})
    result = validate(manifest=manifest, files={HOW: content})
    assert result.errors == ([] if ok else [f"{HOW}: missing YAML frontmatter"])


def test_check_8_requires_a_generated_at_value() -> None:
    body = "---\ngenerated_at: today\n---\nnew\n"
    assert validate(manifest=_manifest(), files={HOW: body}).errors == [f"{HOW}: missing generated_at"]


def test_check_9_requires_generated_at_to_change() -> None:
    body = "---\ngenerated_at: '2024-01-01T00:00:00Z'\n---\nnew text\n"
    assert validate(manifest=_manifest(), files={HOW: body}).errors == [f"{HOW}: generated_at not updated"]


def test_check_9_passes_when_the_original_had_no_generated_at() -> None:
    manifest = _manifest()
    manifest["current_bootstrap_snapshot"]["how-it-works.md"] = "---\n---\nold\n"
    assert validate(manifest=manifest, files={HOW: GOOD}).ok


def test_check_10_rejects_unchanged_content() -> None:
    manifest = _manifest(
        validation_rules={"must_diff_content": True, "allowed_paths": [HOW]},
    )
    same = manifest["current_bootstrap_snapshot"]["how-it-works.md"]
    assert validate(manifest=manifest, files={HOW: same}).errors == [f"{HOW}: content unchanged"]
    manifest["current_bootstrap_snapshot"]["how-it-works.md"] = ""
    assert validate(manifest=manifest, files={HOW: ""}).ok  # skipped when the original is empty


def test_check_11_rejects_a_changed_snapshot() -> None:
    manifest = _manifest()
    current = {**manifest["current_bootstrap_snapshot"], "what-is.md": "edited"}
    result = validate(manifest=manifest, files={HOW: GOOD}, current_snapshot=current)
    assert result.errors == ["snapshot_hash mismatch: bootstrap changed between prepare and commit"]


def test_it_collects_non_stopping_errors_together_and_checks_rejected_paths_content() -> None:
    result = validate(
        manifest=_manifest(),
        files={"../x.md": "no frontmatter", "": "---\n---\n"},
        current_snapshot={"what-is.md": "changed"},
    )
    assert result.errors == [
        "file outside allowed_paths: ../x.md",
        "../x.md: missing YAML frontmatter",
        "../x.md: missing generated_at",
        "file outside allowed_paths: ",
        ": missing YAML frontmatter",
        ": missing generated_at",
        "snapshot_hash mismatch: bootstrap changed between prepare and commit",
    ]


def test_it_skips_content_checks_when_the_flags_are_off() -> None:
    manifest = _manifest(validation_rules={"allowed_paths": ["evil.txt"]})
    assert validate(manifest=manifest, files={"evil.txt": "pwned"}).ok


def test_it_strips_invisible_characters_and_html_comments() -> None:
    dirty = "a\u200bb\u200c\u200d\u2060\ufeffc \u202eevil\u202c \u2066x\u2069 <!-- hidden\nline -->visible"
    assert strip_injection_chars(dirty) == "abc evil x visible"


def test_html_comments_go_as_the_regex_removes_them_in_one_pass_over_any_text() -> None:
    """AIOSON's rule is ``re.sub(r"<!--[\\s\\S]*?-->", "")``; that regex is quadratic on a text of openings
    without a close (a 160 KB commit held a web thread 41 s). The one-pass version gives the regex's output
    on every string of the pieces that matter, and takes a big unclosed text (8 MB here) at once."""
    import random
    import re

    regex = re.compile(r"<!--[\s\S]*?-->")
    pieces = ["<", "!", "-", ">", "a", "<!--", "-->", "\n"]
    rng = random.Random(7)
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert strip_html_comments(text) == regex.sub("", text), text
    unclosed = "---\ngenerated_at: 1\n---\n" + "<!--" * 2_000_000
    assert strip_html_comments(unclosed) == unclosed
    assert strip_html_comments(unclosed + "-->tail") == "---\ngenerated_at: 1\n---\ntail"
