"""AIOSON's reflect engine (``src/memory-reflect-engine.js``), pure: no git, no disk, no model call.

Every regex, reason string, threshold and error message here is AIOSON's exactly (docs/compat/aioson.md); where
AIOSON's docs and code disagree, this follows the code (docs/compat/aioson.md#code-over-docs).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# The four bootstrap files in their fixed order (BOOTSTRAP_FILES); the snapshot hash feeds them in it.
BOOTSTRAP_FILES = ("what-is.md", "how-it-works.md", "what-it-does.md", "current-state.md")
BOOTSTRAP_DIR = ".aioson/context/bootstrap"
MANIFEST_PATH = ".aioson/runtime/reflect-prompt.json"
DEFAULT_GIT_RANGE = "HEAD~3..HEAD"
VOLUME_FILES_THRESHOLD = 10
VOLUME_LINES_THRESHOLD = 200

# Signal key → (regex, kind). Case-sensitive, tested against every changed path as git prints it (docs/compat/aioson.md#signals).
LIST_SIGNALS: dict[str, re.Pattern[str]] = {
    "routes": re.compile(r"(^|\/)(routes|controllers)\/"),
    "api": re.compile(r"(^|\/)(pages|app)\/api\/"),
    "models": re.compile(r"(^|\/)(models|migrations)\/"),
    "prisma": re.compile(r"(^|\/)prisma\/schema\.prisma$"),
    "laravelModels": re.compile(r"(^|\/)app\/Models\/"),
    "prd": re.compile(r"\.aioson\/context\/prd-[^/]+\.md$"),
    "requirements": re.compile(r"\.aioson\/context\/requirements-[^/]+\.md$"),
}
BOOLEAN_SIGNALS: dict[str, re.Pattern[str]] = {
    "features": re.compile(r"\.aioson\/context\/features\.md$"),
    "currentState": re.compile(r"\.aioson\/context\/bootstrap\/current-state\.md$"),
}
CODE_SIGNALS = ("routes", "api", "models", "prisma", "laravelModels")
PRODUCT_SIGNALS = ("prd", "features", "requirements")

_FILES_CHANGED = re.compile(r"(\d+)\s+files?\s+changed")
_INSERTIONS = re.compile(r"(\d+)\s+insertions?")
_DELETIONS = re.compile(r"(\d+)\s+deletions?")

# JavaScript's ``\s`` (it includes U+FEFF and excludes U+001C–U+001F and U+0085, unlike Python's), and
# ``\Z`` for JavaScript's ``$`` without the m flag: the regexes then behave as AIOSON's do.
_JS_S = "[\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
FRONTMATTER = re.compile(rf"^---{_JS_S}*\n[\s\S]*?\n---{_JS_S}*(\n|\Z)")
GENERATED_AT = re.compile(rf"generated_at{_JS_S}*:{_JS_S}*[\"']?([0-9T:\-.Z+]+)[\"']?")

# stripInjectionChars (src/lib/llm-content-sanitizer.js): zero-width, bidi controls, HTML comments.
_INVISIBLE = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u202a-\u202e\u2066-\u2069]")

MSG_MANIFEST_INVALID = "manifest missing or invalid"
MSG_NO_FILES = "no files to commit"
MSG_NO_ALLOWED_PATHS = "manifest validation_rules.allowed_paths is missing or empty"
MSG_FILES_EMPTY = "files map is empty"
MSG_SNAPSHOT_MISMATCH = "snapshot_hash mismatch: bootstrap changed between prepare and commit"


@dataclass(frozen=True)
class Shortstat:
    files: int = 0
    insertions: int = 0
    deletions: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"files": self.files, "insertions": self.insertions, "deletions": self.deletions}


def parse_shortstat(text: str) -> Shortstat:
    """``git diff --shortstat`` output → counts; a missing part counts as 0."""

    def number(pattern: re.Pattern[str]) -> int:
        match = pattern.search(text or "")
        return int(match.group(1)) if match else 0

    return Shortstat(number(_FILES_CHANGED), number(_INSERTIONS), number(_DELETIONS))


def detect_signals(changed_files: Iterable[str]) -> dict[str, Any]:
    """Every signal key → the matching paths (list signals) or whether any path matched (boolean ones)."""
    paths = list(changed_files)
    signals: dict[str, Any] = {key: [p for p in paths if rx.search(p)] for key, rx in LIST_SIGNALS.items()}
    for key, rx in BOOLEAN_SIGNALS.items():
        signals[key] = any(rx.search(p) for p in paths)
    return signals


def is_high_volume(shortstat: Shortstat) -> bool:
    """Both bounds inclusive: ≥ 10 files **and** ≥ 200 changed lines."""
    return (
        shortstat.files >= VOLUME_FILES_THRESHOLD
        and shortstat.insertions + shortstat.deletions >= VOLUME_LINES_THRESHOLD
    )


def reasons_for(signals: Mapping[str, Any], shortstat: Shortstat) -> list[str]:
    """AIOSON's reason strings, in its order, each only when its signal is present."""
    reasons: list[str] = []
    if signals["routes"]:
        reasons.append(f"routes/controllers touched ({len(signals['routes'])} files)")
    if signals["api"]:
        reasons.append(f"api handlers touched ({len(signals['api'])} files)")
    if signals["models"]:
        reasons.append(f"models/migrations touched ({len(signals['models'])} files)")
    if signals["prisma"]:
        reasons.append("prisma/schema.prisma changed")
    if signals["laravelModels"]:
        reasons.append(f"app/Models touched ({len(signals['laravelModels'])} files)")
    if signals["prd"]:
        reasons.append(f"prd-*.md changed ({len(signals['prd'])})")
    if signals["requirements"]:
        reasons.append(f"requirements-*.md changed ({len(signals['requirements'])})")
    if signals["features"]:
        reasons.append("features.md changed")
    if signals["currentState"]:
        reasons.append("bootstrap/current-state.md changed")
    if is_high_volume(shortstat):
        lines = shortstat.insertions + shortstat.deletions
        reasons.append(f"high volume: {shortstat.files} files, {lines} lines")
    return reasons


@dataclass
class Evaluation:
    verdict: str
    reasons: list[str]
    signals: dict[str, Any]
    shortstat: Shortstat
    bootstrap_present: bool
    changed_files: list[str]
    git_range: str
    agent: str

    @property
    def relevant(self) -> bool:
        return self.verdict == "relevant"

    def as_dict(self) -> dict[str, Any]:
        """The shape of AIOSON's ``evaluate()`` result (camelCase keys, as its ``--json`` prints them)."""
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "signals": dict(self.signals),
            "shortstat": self.shortstat.as_dict(),
            "bootstrapPresent": self.bootstrap_present,
            "changedFiles": list(self.changed_files),
            "gitRange": self.git_range,
            "agent": self.agent,
        }


def evaluate(
    *,
    changed_files: Iterable[str],
    shortstat: Shortstat,
    bootstrap_present: bool,
    git_range: str = DEFAULT_GIT_RANGE,
    agent: str = "unknown",
) -> Evaluation:
    """The heuristic: ``relevant`` when at least one reason exists, otherwise ``skip``."""
    files = [p for p in changed_files if p]
    signals = detect_signals(files)
    reasons = reasons_for(signals, shortstat)
    return Evaluation(
        verdict="relevant" if reasons else "skip",
        reasons=reasons,
        signals=signals,
        shortstat=shortstat,
        bootstrap_present=bootstrap_present,
        changed_files=files,
        git_range=git_range,
        agent=agent,
    )


def select_targets(signals: Mapping[str, Any]) -> list[str]:
    """Bootstrap file names to rewrite, in AIOSON's insertion order; ``what-is.md`` is never one."""
    targets: dict[str, None] = {}
    if any(signals.get(key) for key in CODE_SIGNALS):
        targets["how-it-works.md"] = None
        targets["current-state.md"] = None
    if any(signals.get(key) for key in PRODUCT_SIGNALS):
        targets["what-it-does.md"] = None
        targets["current-state.md"] = None
    if signals.get("currentState"):
        targets["current-state.md"] = None
    if not targets:
        targets["current-state.md"] = None
    return list(targets)


def snapshot_hash(snapshot: Mapping[str, str]) -> str:
    """SHA-256 over ``name \\0 content \\0`` for the four files in their fixed order (missing → "")."""
    digest = hashlib.sha256()
    for name in BOOTSTRAP_FILES:
        digest.update(name.encode("utf-8"))
        digest.update(b"\0")
        content = snapshot.get(name)
        digest.update((content if isinstance(content, str) else "").encode("utf-8", errors="surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


def iso_timestamp(moment: datetime) -> str:
    """JavaScript's ``Date.toISOString()``: UTC, milliseconds, ``Z``."""
    from datetime import UTC

    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def instructions_for(targets: list[str]) -> str:
    sentences = [
        "Edit only: " + ", ".join(f"bootstrap/{t}" for t in targets) + ".",
        "Remove obsolete entries. Add new capabilities. Preserve YAML frontmatter.",
        "Update the `generated_at` field in each touched file.",
    ]
    if "current-state.md" in targets:
        sentences.append(
            'In current-state.md, prefix each new entry under "## What the system already has" with '
            "`[{feature-slug} · {YYYY-MM-DD}]`."
        )
    sentences.append("When done, write the result via `aioson memory:reflect-commit` (do not edit other files).")
    return " ".join(sentences)


def build_manifest(
    *,
    evaluation: Evaluation,
    snapshot: Mapping[str, str],
    now: datetime,
    session_id: str | None = None,
    bootstrap_dir: str = BOOTSTRAP_DIR,
) -> dict[str, Any]:
    """The manifest of docs/compat/aioson.md#manifest, every field, in AIOSON's key order."""
    targets = select_targets(evaluation.signals)
    stamp = iso_timestamp(now)
    full_snapshot = {name: snapshot.get(name) or "" for name in BOOTSTRAP_FILES}
    stat = evaluation.shortstat
    return {
        "version": 1,
        "session_id": session_id or f"{evaluation.agent or 'agent'}-{stamp}",
        "trigger_agent": evaluation.agent or None,
        "git_range": evaluation.git_range,
        "heuristic_verdict": evaluation.verdict,
        "heuristic_reasons": list(evaluation.reasons),
        "targets": targets,
        "current_bootstrap_snapshot": full_snapshot,
        "snapshot_hash": snapshot_hash(full_snapshot),
        "diff_summary": f"{stat.files} files, +{stat.insertions}/-{stat.deletions}",
        "changed_files": list(evaluation.changed_files),
        "instructions": instructions_for(targets),
        "validation_rules": {
            "must_have_frontmatter": True,
            "must_update_generated_at": True,
            "must_diff_content": True,
            "allowed_paths": [f"{bootstrap_dir.rstrip('/')}/{t}" for t in targets],
        },
        "generated_at": stamp,
    }


@dataclass
class Validation:
    ok: bool
    errors: list[str] = field(default_factory=list)


def _is_escaping(path: str) -> bool:
    # Absolute (POSIX, Windows drive or UNC) or any "/"- or "\"-separated segment equal to "..".
    if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path):
        return True
    return any(segment == ".." for segment in re.split(r"[\\/]", path))


def _basename(path: str) -> str:
    return re.split(r"[\\/]", path)[-1]


def _truthy(value: Any) -> bool:
    # JavaScript truthiness of a manifest flag, so a tampered manifest is read as AIOSON reads it.
    return value not in (None, False, 0, "", [], {})


def validate(*, manifest: Any, files: Any, current_snapshot: Mapping[str, str] | None = None) -> Validation:
    """The eleven checks of docs/compat/aioson.md#commit-checks step 3, in order, with AIOSON's exact messages.

    Checks 1–3 stop; the rest are collected. ``current_snapshot`` is the four files re-read from disk.
    """
    if not isinstance(manifest, dict):
        return Validation(False, [MSG_MANIFEST_INVALID])
    if not isinstance(files, dict):
        return Validation(False, [MSG_NO_FILES])
    rules = manifest.get("validation_rules")
    rules = rules if isinstance(rules, dict) else {}
    allowed = rules.get("allowed_paths")
    if not isinstance(allowed, list) or not allowed:
        return Validation(False, [MSG_NO_ALLOWED_PATHS])

    errors: list[str] = []
    if not files:
        errors.append(MSG_FILES_EMPTY)
    original_snapshot = manifest.get("current_bootstrap_snapshot")
    original_snapshot = original_snapshot if isinstance(original_snapshot, dict) else {}
    for path, content in files.items():
        if _is_escaping(path):
            errors.append(f"file outside allowed_paths: {path}")
        elif path not in allowed:
            errors.append(f"file outside allowed_paths: {path}")
        text = content if isinstance(content, str) else ""
        if _truthy(rules.get("must_have_frontmatter")) and not FRONTMATTER.search(text):
            errors.append(f"{path}: missing YAML frontmatter")
        original = original_snapshot.get(_basename(path))
        original = original if isinstance(original, str) else ""
        if _truthy(rules.get("must_update_generated_at")):
            new_match = GENERATED_AT.search(text)
            if not new_match:
                errors.append(f"{path}: missing generated_at")
            else:
                old_match = GENERATED_AT.search(original)
                if old_match and old_match.group(1) == new_match.group(1):
                    errors.append(f"{path}: generated_at not updated")
        if _truthy(rules.get("must_diff_content")) and original and text == original:
            errors.append(f"{path}: content unchanged")
    expected = manifest.get("snapshot_hash")
    if current_snapshot is not None and expected and snapshot_hash(current_snapshot) != expected:
        errors.append(MSG_SNAPSHOT_MISMATCH)
    return Validation(not errors, errors)


def strip_injection_chars(text: str) -> str:
    """Zero-width and bidi control characters and HTML comments removed (after validation, before write)."""
    return strip_html_comments(_INVISIBLE.sub("", text))


def strip_html_comments(text: str) -> str:
    """What ``re.sub(r"<!--[\\s\\S]*?-->", "", text)`` gives (AIOSON's rule), in one pass: that regex tries
    every "<!--" against the rest of the text, so a committed file of "<!--" without "-->" took time
    quadratic in its size (160 KB: 41 s of a web thread, holding the GIL and the workspace's row lock)."""
    kept: list[str] = []
    pos = 0
    while (start := text.find("<!--", pos)) >= 0:
        end = text.find("-->", start + 4)
        if end < 0:  # no comment closes after this opening, so none after a later one either
            break
        kept.append(text[pos:start])
        pos = end + 3
    kept.append(text[pos:])
    return "".join(kept)
