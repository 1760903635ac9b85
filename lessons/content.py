"""chatcli's lesson text: the four-line fact content (spec §9.3), its id (§11.2) and tags (§11.1)."""

from __future__ import annotations

import hashlib
import re

_WS = re.compile(r"\s+")


def one_line(text: str) -> str:
    """Trim and collapse every whitespace run (newlines included) to one space; empty → ``(unknown)``."""
    collapsed = _WS.sub(" ", text).strip()
    return collapsed or "(unknown)"


def fact_content(situation: str, mistake: str, correction: str, trigger: str) -> str:
    return "\n".join(
        [
            f"LESSON: {one_line(situation)}",
            f"MISTAKE: {one_line(mistake)}",
            f"CORRECTION: {one_line(correction)}",
            f"TRIGGER: {trigger}",
        ]
    )


def fact_id(content: str) -> str:
    """Lowercase hex of the first 12 bytes of SHA-256(lower(trim(content)))."""
    return hashlib.sha256(content.strip().lower().encode()).digest()[:12].hex()


def lesson_tags(model_tags: list[str], trigger: str) -> list[str]:
    """The lesson's own tags in order, then ``reflexion`` and ``trigger:<trigger>`` (no dedupe, as chatcli)."""
    return [*model_tags, "reflexion", f"trigger:{trigger}"]
