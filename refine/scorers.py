"""chatcli's three similarity scorers (docs/compat/chatcli.md#char-scorer), with its exact formulas.

Each returns a ``Score``: similarity and confidence in [0, 1], the cost of computing it and, when it
could not score, the reason in ``degraded_from`` plus an ``error``. The embedding scorer lives in
``refine.convergence`` because it owns a cache and a breaker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Cost:
    duration_ms: float = 0.0
    tokens_used: int = 0
    embed_queries: int = 0

    def add(self, other: Cost) -> None:
        self.duration_ms += other.duration_ms
        self.tokens_used += other.tokens_used
        self.embed_queries += other.embed_queries


@dataclass
class Score:
    similarity: float = 0.0
    confidence: float = 0.0
    cost: Cost = field(default_factory=Cost)
    degraded_from: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"similarity": self.similarity, "confidence": self.confidence, "degraded_from": self.degraded_from}


def clamp(value: float) -> float:
    if value != value:  # NaN
        return 0.0
    return min(1.0, max(0.0, value))


# --- char (docs/compat/chatcli.md#char-scorer) ------------------------------------------------------------------------------------
def char_score(a: str, b: str) -> Score:
    """Position-by-position code point comparison; the length difference counts as mismatches.

    Confidence is U-shaped: 0.3 + 0.6·|2s − 1| (0.9 at both ends — 0.8999999999999999 in floating point —
    and 0.3 at 0.5): a score near the middle says little.
    """
    if not a and not b:
        return Score(1.0, 1.0)
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    mismatches = sum(1 for i in range(len(short)) if short[i] != long_[i])
    total = mismatches + (len(long_) - len(short))
    similarity = clamp(1 - total / len(long_))
    return Score(similarity, clamp(0.3 + 0.6 * abs(2 * similarity - 1)))


# --- Jaccard (docs/compat/chatcli.md#jaccard-scorer) ---------------------------------------------------------------------------------
# chatcli's defaultStopWords: 61 entries, 59 distinct. The one-letter entries are redundant (1-byte tokens
# are dropped anyway) and "você"/"nós" can never match because the tokenizer splits at non-ASCII
# letters; they are kept so the list reads like the original.
STOP_WORDS: frozenset[str] = frozenset(
    "a an the and or but if then else as at by for in of on to with from is was are were be been being "
    "i you he she we they it this that do does did not no "
    "o a os as e ou mas se para com por que um uma eu você ele ela nós eles elas".split()
)
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def tokens(text: str, stop_words: frozenset[str] = STOP_WORDS) -> set[str]:
    """chatcli's tokenizer: lowercase, ASCII ``a–z 0–9 - _`` build a token, every other code point
    (including é, ç, ã and ``.``) ends it; tokens of one byte and stop words are dropped."""
    found: set[str] = set()
    current: list[str] = []
    for ch in text.lower() + " ":
        if ch in _TOKEN_CHARS:
            current.append(ch)
            continue
        if current:
            token = "".join(current)
            if len(token) > 1 and token not in stop_words:
                found.add(token)
            current = []
    return found


def newton_sqrt4(p: float) -> float:
    """Four Newton steps from x = p: chatcli's approximation of √p (over-estimates for larger p)."""
    x = p
    for _ in range(4):
        x = (x + p / x) / 2
    return x


def jaccard_score(a: str, b: str, *, stop_words: frozenset[str] = STOP_WORDS) -> Score:
    set_a, set_b = tokens(a, stop_words), tokens(b, stop_words)
    if not set_a and not set_b:
        return Score(1.0, 0.5)
    if not set_a or not set_b:
        return Score(0.0, 0.7)
    similarity = len(set_a & set_b) / len(set_a | set_b)
    confidence = min(newton_sqrt4(float(len(set_a) * len(set_b))) / 50, 0.95)
    return Score(clamp(similarity), confidence)
