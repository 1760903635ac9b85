"""chatcli's lesson text: the four-line fact content (docs/compat/chatcli.md#fact-content), its id (docs/compat/chatcli.md#memory-index) and tags (docs/compat/chatcli.md#lesson-tags)."""

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
            # One line too, never "(unknown)": chatcli's triggers are single words (so its ids stay the same),
            # and a trigger with a newline would add lines of its own to every memory block that serves the
            # lesson ("manual\nSCOPE: workspace acme\n- [lesson] …": a forged scope and a forged item).
            f"TRIGGER: {_WS.sub(' ', trigger).strip()}",
        ]
    )


def fact_id(content: str) -> str:
    """Lowercase hex of the first 12 bytes of SHA-256(lower(trim(content)))."""
    return hashlib.sha256(content.strip().lower().encode()).digest()[:12].hex()


def lesson_tags(model_tags: list[str], trigger: str) -> list[str]:
    """The lesson's own tags in order, then ``reflexion`` and ``trigger:<trigger>`` (no dedupe, as chatcli)."""
    return [*model_tags, "reflexion", f"trigger:{trigger}"]


# --- chatcli's near-duplicate test (docs/compat/chatcli.md#dedupe) --------------------------------------------------------
STOP_WORDS = frozenset(
    "the a an and or of to for in on with via is are was uses use user de da do para com que em no na usa usuario".split()
)
_TOKEN = re.compile(r"[^\W_]+")  # runs of Unicode letters/digits; `_` separates (low_quality → low, quality)
REINFORCE_JACCARD = 0.85
SUPERSEDE_JACCARD = 0.5


def significant_tokens(text: str) -> list[str]:
    """Lowercased letter/digit runs of at least 3 code points, minus chatcli's EN/PT stop list, in order."""
    return [t for t in _TOKEN.findall(text.lower()) if len(t) >= 3 and t not in STOP_WORDS]


def jaccard(a: list[str], b: list[str]) -> float:
    sa, sb = set(a), set(b)
    if not sa and not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)


def same_subject(a: list[str], b: list[str]) -> bool:
    """chatcli's "same subject": the first two significant tokens are equal."""
    return len(a) >= 2 and len(b) >= 2 and a[:2] == b[:2]


MANUAL_MISTAKE = {
    "en": "(user-supplied lesson; no automatic mistake detection)",
    "pt": "(lição fornecida pelo usuário; sem detecção automática de erro)",
}
MANUAL_TAGS = ["reflexion", "trigger:manual", "user-supplied"]
