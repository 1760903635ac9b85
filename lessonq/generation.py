"""Lesson generation as chatcli does it (docs/compat/chatcli.md#lesson-generation): the prompt layout, the truncation and the tolerant
parser. The LLM call itself goes through ``lessonboard.llm``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lessonboard import llm
from lessonboard.inputs import storable
from lessonboard.llm import promptfiles, replies

# The prompt is a versioned file (lessonboard.llm.promptfiles): a new wording is a new file and version.
LESSON_PROMPT = promptfiles.load(Path(__file__).resolve().parent / "prompts", "lesson-v1")
LESSON_SYSTEM_PROMPT = LESSON_PROMPT.text

MAX_TOKENS = 600  # chatcli's lesson call
PROMPT_VERSION = LESSON_PROMPT.version  # recorded on every call (lessonboard.llm.usage)
ATTEMPT_LIMIT = 1500
OUTCOME_LIMIT = 800
# Not in chatcli, which sends the whole task: a trigger's task may be megabytes (the WAL accepts up to
# 16 MiB), so the prompt carries its first TASK_LIMIT characters (docs/api.md#input-policy).
TASK_LIMIT = 8000

NO_BLOCKS = "lesson parser: no recognized blocks in response"
MISSING_REQUIRED = "lesson parser: missing required blocks (situation, correction)"

BLOCK_NAMES = ("situation", "mistake", "correction", "tags", "skip")
_BLOCK = re.compile(r"<(situation|mistake|correction|tags|skip)>(.*?)</", re.DOTALL)
# A reply cut by max_tokens ends inside its last block: that block's text up to the end still counts.
_CUT_BLOCK = re.compile(
    r"<(situation|mistake|correction|tags)>((?:(?!</?(?:situation|mistake|correction|tags)>).)*)\Z", re.S
)
CUT_MARK = "\n[… {cut} characters cut …]\n"


class LessonParseError(ValueError):
    """The model's answer has no usable lesson: permanent (the job goes to the DLQ). ``reply``: the text the
    parser refused, kept for the dead-job page."""

    def __init__(self, message: str, *, reply: str = "") -> None:
        super().__init__(message)
        self.reply = reply


@dataclass(frozen=True)
class GeneratedLesson:
    situation: str
    mistake: str
    correction: str
    tags: list[str] = field(default_factory=list)
    trigger: str = ""


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def head_tail(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: when longer, its first third and its last two thirds around a
    mark saying how much was cut (an agent's output usually fails at its end: the test summary, the
    traceback). The mark counts toward the limit."""
    if len(text) <= limit:
        return text
    mark = CUT_MARK.format(cut=len(text))  # the widest the number can be: the mark never grows past this
    room = max(limit - len(mark), 0)
    head = room // 3
    tail = room - head
    cut = len(text) - head - tail
    return text[:head] + CUT_MARK.format(cut=cut) + (text[-tail:] if tail else "")


def user_message(*, task: str, attempt: str, outcome: str, trigger: str) -> str:
    return (
        f"TASK:\n{truncate(task, TASK_LIMIT)}\n\nATTEMPT:\n{head_tail(attempt, ATTEMPT_LIMIT)}\n\n"
        f"OUTCOME (why we are reflecting):\n{truncate(outcome, OUTCOME_LIMIT)}\n\nTRIGGER: {trigger}"
    )


def messages(*, task: str, attempt: str, outcome: str, trigger: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": LESSON_SYSTEM_PROMPT},
        {"role": "user", "content": user_message(task=task, attempt=attempt, outcome=outcome, trigger=trigger)},
    ]


def parse(text: str, trigger: str, *, truncated: bool = False) -> GeneratedLesson | None:
    """The lesson in ``text``; ``None`` for ``<skip>``; ``LessonParseError`` when unusable (docs/compat/chatcli.md#lesson-parser).

    Reasoning blocks (``<think>``) are dropped first and a fenced block's body read when there is one
    (``lessonboard.llm.replies``), so a block named in the reasoning never counts. When the reply was cut by
    ``max_tokens`` (``truncated``: finish_reason "length") its last, unclosed block keeps the text it has;
    otherwise an unclosed block counts for nothing, as in chatcli."""
    answer = replies.answer_text(text, tags=BLOCK_NAMES).text
    blocks: dict[str, str] = {}
    for name, body in _BLOCK.findall(answer):
        # the last occurrence wins; model text is stored, so NUL and lone surrogates become U+FFFD
        blocks[name] = storable(body.strip())
    cut = _CUT_BLOCK.search(answer) if truncated else None
    if cut is not None and cut.group(2).strip():
        blocks.setdefault(cut.group(1), storable(cut.group(2).strip()))
    if not blocks:
        refused = replies.refusal(text)
        if refused:
            raise LessonParseError(f"lesson parser: the model refused: {refused}", reply=text)
        raise LessonParseError(NO_BLOCKS, reply=text)
    if "skip" in blocks:
        return None
    if not blocks.get("situation") or not blocks.get("correction"):
        raise LessonParseError(MISSING_REQUIRED, reply=text)
    tags = [t.strip().lower() for t in blocks.get("tags", "").split(",")]
    return GeneratedLesson(
        situation=blocks["situation"],
        mistake=blocks.get("mistake", ""),
        correction=blocks["correction"],
        tags=[t for t in tags if t],
        trigger=trigger,
    )


def generate(
    *,
    task: str,
    attempt: str,
    outcome: str,
    trigger: str,
    timeout: float | None = None,
    chat: Callable[..., llm.ChatResult] = llm.chat,
) -> GeneratedLesson | None:
    """Ask the LLM for a lesson. Raises the gateway's errors or ``LessonParseError``."""
    result = chat(
        messages(task=task, attempt=attempt, outcome=outcome, trigger=trigger), max_tokens=MAX_TOKENS, timeout=timeout
    )
    return parse(result.text, trigger, truncated=result.finish_reason == "length")
