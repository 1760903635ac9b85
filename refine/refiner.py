"""chatcli's RefinerAgent protocol (docs/compat/chatcli.md#refine-pass step 1, docs/compat/chatcli.md#refiner-protocol): the ``[REFINE_DRAFT]`` directive, its
tolerant parse, the prompt, and the ``<critique>`` / ``<revised>`` reply with its fallback.

The LLM call is injected (``complete``, ``lessonboard.llm.chat`` by default) so tests can hand in the
reply text while everything else — directive, parse, fallback — runs for real.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from lessonboard import llm
from lessonboard.inputs import storable
from lessonboard.llm import promptfiles, replies

DIRECTIVE = "[REFINE_DRAFT]"
DEFAULT_TASK = "Improve the quality and accuracy of the following draft."
NO_MATERIAL_ISSUES = "no material issues"

# Our own words for chatcli's defaultRefinerPrompt: docs/compat/chatcli.md#refiner-protocol records what it
# asks for, not its wording.
REFINER_PROMPT = promptfiles.load(Path(__file__).resolve().parent / "prompts", "refiner-v1")
SYSTEM_PROMPT = REFINER_PROMPT.text

Complete = Callable[[list[dict[str, str]]], llm.ChatResult]


def directive(task: str, draft: str) -> str:
    """The task text chatcli dispatches to the refiner agent."""
    return f"{DIRECTIVE}\nTask:\n{task}\n\nDraft:\n{draft}"


def parse_directive(text: str) -> tuple[str, str]:
    """(task, draft) from a directive, as chatcli's refiner reads it: case-insensitively the first
    ``draft:`` splits draft from task and the first ``task:`` marks the task start. No ``draft:`` → the
    whole body is the draft. (chatcli panics when ``draft:`` comes before ``task:``; here the task is
    then taken as missing.)"""
    body = text.strip()
    if body.startswith(DIRECTIVE):
        body = body[len(DIRECTIVE) :].strip()
    lower = body.lower()
    d = lower.find("draft:")
    if d < 0:
        return DEFAULT_TASK, body
    draft = body[d + len("draft:") :].strip()
    t = lower.find("task:")
    task = body[t + len("task:") : d].strip() if 0 <= t < d else ""
    return task or DEFAULT_TASK, draft


def block(text: str, tag: str) -> str | None:
    """Text after the first ``<tag>`` up to the next ``</tag>`` (or to the end if unclosed), trimmed;
    ``None`` when there is no opening tag."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    start = text.find(opening)
    if start < 0:
        return None
    rest = text[start + len(opening) :]
    end = rest.find(closing)
    return (rest if end < 0 else rest[:end]).strip()


_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*\S)\s*$")


def bullets(critique: str) -> list[str]:
    """The critique's ``- `` bullets (also ``*``, ``•`` or ``1.``); a critique without bullets counts as
    one item if it has any text."""
    found = [m.group(1) for line in critique.splitlines() if (m := _BULLET.match(line))]
    if not found and critique.strip():
        found = [critique.strip()]
    return found


@dataclass
class RefinerReply:
    output: str  # the revised draft (or, on protocol violation, the whole raw reply)
    critique: str = ""
    bullets: list[str] = field(default_factory=list)
    raw: str = ""
    protocol_ok: bool = True  # False when <revised> was missing or empty and the raw reply was used
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def reports_issues(self) -> bool:
        """The critique lists something to fix (and does not say "no material issues")."""
        return bool(self.bullets) and NO_MATERIAL_ISSUES not in self.critique.lower()


def parse_reply(raw: str) -> RefinerReply:
    """The critique and revised draft of a reply, after ``<think>`` blocks are dropped and a fence around
    the two blocks is opened (``lessonboard.llm.replies``); a ``<revised>`` cut by ``max_tokens`` keeps what
    it has. No (or an empty) ``<revised>`` is a protocol violation: chatcli's fallback output, flagged."""
    raw = storable(raw)  # model text is stored and shown: NUL and lone surrogates become U+FFFD
    answer = replies.answer_text(raw, tags=("critique", "revised")).text
    revised = block(answer, "revised")
    critique = block(answer, "critique") or ""
    if revised is None or not revised.strip():
        # chatcli's fallback: the whole raw response becomes the output.
        return RefinerReply(output=raw, critique=critique, bullets=bullets(critique), raw=raw, protocol_ok=False)
    return RefinerReply(output=revised, critique=critique, bullets=bullets(critique), raw=raw)


class Refiner:
    """One refine call: directive → parse → chat → parse reply. Raises ``lessonboard.llm.LLMError``."""

    def __init__(self, complete: Complete | None = None) -> None:
        # The refiner may use a model of its own (chatcli's refiner is a separate agent type).
        self.complete: Complete = complete or (lambda messages: llm.chat(messages, model=settings.REFINE_MODEL or None))

    def __call__(self, task: str, draft: str) -> RefinerReply:
        parsed_task, parsed_draft = parse_directive(directive(task, draft))
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"TASK:\n{parsed_task}\n\nDRAFT:\n{parsed_draft}"},
        ]
        result = self.complete(messages)
        reply = parse_reply(result.text)
        reply.model = result.model
        reply.prompt_tokens = result.prompt_tokens
        reply.completion_tokens = result.completion_tokens
        return reply
