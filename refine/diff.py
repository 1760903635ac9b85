"""Word-level diff for the compare page: ``difflib`` over word tokens (words, runs of whitespace and
single punctuation marks), so a changed word is highlighted whole rather than letter by letter."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


@dataclass(frozen=True)
class Segment:
    op: str  # "equal", "del" (left side only) or "ins" (right side only)
    text: str


@dataclass(frozen=True)
class SideBySide:
    left: list[Segment]
    right: list[Segment]
    inserted_words: int
    deleted_words: int


def word_tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _merge(segments: list[Segment]) -> list[Segment]:
    merged: list[Segment] = []
    for seg in segments:
        if merged and merged[-1].op == seg.op:
            merged[-1] = Segment(seg.op, merged[-1].text + seg.text)
        elif seg.text:
            merged.append(seg)
    return merged


def _words(tokens: list[str]) -> int:
    return sum(1 for t in tokens if not t.isspace())


def side_by_side(a: str, b: str) -> SideBySide:
    """The left column shows ``a`` with deletions marked, the right ``b`` with insertions marked."""
    ta, tb = word_tokens(a), word_tokens(b)
    left: list[Segment] = []
    right: list[Segment] = []
    inserted = deleted = 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes():
        if op == "equal":
            left.append(Segment("equal", "".join(ta[i1:i2])))
            right.append(Segment("equal", "".join(tb[j1:j2])))
            continue
        if i2 > i1:
            left.append(Segment("del", "".join(ta[i1:i2])))
            deleted += _words(ta[i1:i2])
        if j2 > j1:
            right.append(Segment("ins", "".join(tb[j1:j2])))
            inserted += _words(tb[j1:j2])
    return SideBySide(_merge(left), _merge(right), inserted, deleted)
