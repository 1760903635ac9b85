"""The production proposer: one chat call through the LLM gateway asking for the proposals as JSON.

The prompt lives next to this module (``prompts/propose-<version>.md``) and its version is recorded on
every run with the model's raw output. A reply that is not the expected JSON fails the pass (fail closed):
the pass's caller keeps the raw text for the reviewer to see.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lessonboard import inputs, llm
from lessonboard.llm import promptfiles, replies
from lessonboard.models import Workspace
from lessons.review import memory
from lessons.review.learning import Proposed

PROMPT_VERSION = "propose-v1"
PROMPT_DIR = Path(__file__).resolve().parent / "prompts"


class ProposerError(Exception):
    def __init__(self, message: str, *, raw_output: str = "", model: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.raw_output = inputs.storable(raw_output)
        self.model = model


def system_prompt(workspace: Workspace, *, version: str = PROMPT_VERSION) -> str:
    template = promptfiles.load(PROMPT_DIR, version)
    values: dict[str, Any] = {}
    for target in memory.TARGETS:
        entries = memory.entries_of(workspace, target)
        limit = memory.limit_for(target)
        values[f"{target}_limit"] = limit
        values[f"{target}_usage"] = memory.usage_text(entries, limit)
        values[f"{target}_entries"] = "\n".join(f"- {e}" for e in entries) or "(none)"
    return template.format(**values)


def parse_reply(text: str) -> list[Any]:
    """The raw proposals in a model's reply: a JSON object with a ``proposals`` list, or a bare list.
    The JSON is found as models write it (``lessonboard.llm.replies.extract_json``: ``<think>`` first, a
    fence, a preamble or postscript, a list cut by ``max_tokens`` keeping its complete items); each item
    is validated afterwards by the pydantic models of ``lessons.review.proposals``."""
    try:
        data = replies.extract_json(text).value
        inputs.check_document(data, keep_text=True)
    except inputs.BadInput as exc:
        raise ProposerError(f"proposer reply is not usable JSON: {exc.message}", raw_output=text) from exc
    except (ValueError, RecursionError) as exc:
        refused = replies.refusal(text)
        if refused:
            raise ProposerError(f"proposer refused: {refused}", raw_output=text) from exc
        raise ProposerError(f"proposer reply is not JSON: {exc}", raw_output=text) from exc
    data = inputs.storable_document(data)  # model text is stored: NUL and lone surrogates become U+FFFD
    if isinstance(data, dict):
        data = data.get("proposals")
    if not isinstance(data, list):
        raise ProposerError('proposer reply has no "proposals" list', raw_output=text)
    return data


def llm_proposer(
    workspace: Workspace, *, chat: Callable[..., llm.ChatResult] = llm.chat, version: str = PROMPT_VERSION
) -> Callable[[str], Proposed]:
    def propose(summary: str) -> Proposed:
        messages = [
            {"role": "system", "content": system_prompt(workspace, version=version)},
            {"role": "user", "content": f"Summary of the work to review:\n\n{summary}"},
        ]
        try:
            result = chat(messages, temperature=0.0)
        except llm.LLMError as exc:
            raise ProposerError(f"proposer LLM call failed: {exc.message}") from exc
        try:
            items = parse_reply(result.text)
        except ProposerError as exc:
            exc.model = result.model
            raise
        return Proposed(
            items=items, raw_output=inputs.storable(result.text), model=result.model, prompt_version=version
        )

    return propose
