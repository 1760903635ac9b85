"""Replies as models write them: one tolerant extraction used by every parser of model text (the lesson,
critique/revise, review-proposal and HyDE parsers). Validation stays with each parser (pydantic models,
required blocks); this module only finds the answer inside what the model wrapped around it:

- reasoning first: ``<think>…</think>`` (DeepSeek-R1, Qwen QwQ), ``<thinking>…</thinking>``, or a lone
  ``</think>`` whose opening tag was in the chat template; an unclosed ``<think>`` means the answer never
  came (everything was reasoning, usually cut by ``max_tokens``);
- fenced blocks: ```` ```json ```` / ```` ```xml ```` / bare ```` ``` ````, the last fence left open when the
  reply was truncated;
- a preamble ("Here are my proposals:") or a postscript ("Let me know if…") around the answer;
- JSON cut by ``max_tokens``: the complete items before the cut are kept, the cut one dropped, and the
  open strings, arrays and objects closed (``Extracted.repaired`` says so);
- refusals ("I'm sorry, but I can't…") are told apart from garbled answers (``refusal``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

THINK_TAGS = ("think", "thinking", "reasoning")
_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
_THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.I)
_THINK_CLOSE = re.compile(r"</(think|thinking|reasoning)>", re.I)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_REFUSAL = re.compile(
    r"^\W*(?:i'?m sorry|i am sorry|sorry,|i apologi[sz]e|i can(?:no|')t|i cannot|i won'?t|i am unable|i'?m unable|"
    r"i'?m not able|i am not able|as an ai|unfortunately,? i can)",
    re.I,
)


@dataclass
class Extracted:
    """What was found: the answer ``text`` (or JSON ``value``) and notes on what was peeled off."""

    text: str
    value: Any = None
    notes: list[str] = field(default_factory=list)
    repaired: bool = False  # JSON cut short and closed by ``repair_json``


def strip_think(text: str) -> tuple[str, bool]:
    """``text`` without its reasoning blocks; the flag says whether any was there. An unclosed opening tag
    swallows the rest (no answer came); a closing tag without an opening drops everything before it."""
    stripped = _THINK_BLOCK.sub("", text)
    found = stripped != text
    opening = _THINK_OPEN.search(stripped)
    if opening is not None:
        stripped, found = stripped[: opening.start()], True
    closings = list(_THINK_CLOSE.finditer(stripped))
    if closings:
        closing = closings[-1]
        stripped, found = stripped[closing.end() :], True
    return stripped.strip(), found


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block as (language, body), in order; the last may be unclosed (a truncated reply)."""
    return [(m.group(1).lower(), m.group(2).strip()) for m in _FENCE.finditer(text)]


def refusal(text: str) -> str:
    """The refusal's first sentence when ``text`` (reasoning stripped) reads as one, else ""."""
    body, _ = strip_think(text)
    if not _REFUSAL.match(body):
        return ""
    first = re.split(r"(?<=[.!?])\s", body.strip(), maxsplit=1)[0]
    return first[:200]


def answer_text(text: str, *, tags: tuple[str, ...] = ()) -> Extracted:
    """The answer of a tag-protocol reply (lesson blocks, critique/revise): reasoning stripped, and the
    body of a fenced block when the protocol's tags are inside it and not before it (a draft's own code
    fences inside ``<revised>`` stay where they are)."""
    body, thought = strip_think(text)
    notes = ["reasoning block stripped"] if thought else []
    openings = [f"<{tag}>" for tag in tags] or ["<"]
    for match in _FENCE.finditer(body):
        block = match.group(2).strip()
        if any(o in body[: match.start()] for o in openings):
            break  # the protocol's blocks start outside any fence
        if any(o in block for o in openings):
            notes.append(f"fenced {match.group(1).lower() or 'plain'} block")
            return Extracted(text=block, notes=notes)
    return Extracted(text=body, notes=notes)


def extract_json(text: str) -> Extracted:
    """The JSON value in a reply: the whole text, a fenced block, the first object or array after a
    preamble (a postscript after it ignored), or one cut by ``max_tokens`` and repaired. ``ValueError``
    when there is none."""
    body, thought = strip_think(text)
    notes = ["reasoning block stripped"] if thought else []
    if not body:
        raise ValueError("no answer after the reasoning block" if thought else "empty reply")
    candidates: list[tuple[str, str]] = [("", body)]
    for language, block in fenced_blocks(body):
        if language in ("json", "", "javascript", "js", "jsonc"):
            candidates.append((f"fenced {language or 'plain'} block", block))
    # A clean parse of the whole text or of a fence first; only then the scan for a value in prose.
    for note, candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        return Extracted(text=candidate, value=value, notes=notes + ([note] if note else []))
    decoder = json.JSONDecoder()
    first_error: ValueError | None = None
    for note, candidate in candidates[1:] + candidates[:1]:
        for match in re.finditer(r"[\[{]", candidate):
            start = match.start()
            try:
                value, end = decoder.raw_decode(candidate, start)
            except ValueError as exc:
                first_error = first_error or exc
                repaired = repair_json(candidate[start:])
                if repaired is None:
                    continue
                try:
                    value = json.loads(repaired)
                except ValueError:
                    continue
                tag = [note] if note else []
                return Extracted(text=repaired, value=value, notes=notes + tag + ["cut JSON repaired"], repaired=True)
            if not isinstance(value, dict | list):
                continue
            extra = []
            if candidate[:start].strip():
                extra.append("preamble skipped")
            if candidate[end:].strip():
                extra.append("postscript skipped")
            tag = [note] if note else []
            return Extracted(text=candidate[start:end], value=value, notes=notes + tag + extra)
    raise ValueError(f"no JSON value in the reply{f' ({first_error})' if first_error else ''}")


def repair_json(fragment: str) -> str | None:
    """Close a JSON text cut short: keep the elements complete before the cut (an element of an array cut
    halfway is dropped whole, never passed on half-filled), then close the open containers in order.
    ``None`` when nothing complete is left."""
    stack: list[str] = []
    in_string = escape = False
    last_safe = -1  # index just after the last complete element of an array (or a closed container)
    safe_stack: list[str] = []
    for index, char in enumerate(fragment):
        if in_string:
            if escape:
                escape = False
            elif char == "\\":
                escape = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "[{":
            stack.append("]" if char == "[" else "}")
            if char == "[":  # an empty array so far is complete: the cut may drop all its elements
                last_safe, safe_stack = index + 1, list(stack)
        elif char in "]}":
            if not stack:
                return None
            stack.pop()
            if not stack:
                return fragment[: index + 1]  # complete after all (the caller saw trailing junk)
            if stack[-1] == "]":
                last_safe, safe_stack = index + 1, list(stack)
        elif char == "," and stack and stack[-1] == "]":
            last_safe, safe_stack = index, list(stack)
    if not stack or last_safe < 0:
        return None
    head = fragment[:last_safe].rstrip().rstrip(",")
    return head + "".join(reversed(safe_stack))
