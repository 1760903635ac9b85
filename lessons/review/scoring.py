"""The server's score of a proposal an agent wrote itself (docs/reviews.md#who-scores).

An agent's own ``score`` is its confidence: advisory, kept on the proposal (``agent_score``) and shown,
never what a gate reads. The gate reads the server's score:

- with an LLM configured, the review model's: one chat call asking for ``{"score": <0..1>, "reason": …}``
  about the proposed write (``PROMPT``);
- without one, or when that call or its reply fails, ``heuristic_score``: start at 0.6 (below the default
  threshold 0.7), +0.1 for a rationale of at least 20 characters, +0.1 for content of 12–400
  characters, −0.3 when the content states a permission or a blanket rule (``POLICY_WORDS``: allowed,
  permitted, skip, disable, bypass, ignore, always, never, all, no need, without review/tests/approval).

So a specific, explained fact can apply on its own under the default gates; a policy an agent grants
itself ("Deploys to prod are allowed on Fridays.") cannot.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from lessonboard import llm
from lessonboard.llm import promptfiles, replies, usage
from lessons.review.proposals import ReviewProposal

log = logging.getLogger(__name__)

BASE = 0.6
POLICY_WORDS = re.compile(
    r"\b(allow(?:ed|s)?|permit(?:ted|s)?|skip(?:ped|s)?|disabl(?:e|ed|es)|bypass(?:ed)?|ignor(?:e|ed|es)|"
    r"always|never|all|no need|without (?:review|tests?|approval))\b",
    re.IGNORECASE,
)
SCORE_PROMPT = promptfiles.load(Path(__file__).resolve().parent / "prompts", "score-v1")
PROMPT = SCORE_PROMPT.text


def _text(proposal: ReviewProposal) -> str:
    if proposal.lesson is not None:
        return " ".join((proposal.lesson.situation, proposal.lesson.mistake, proposal.lesson.correction))
    return proposal.content or proposal.old_text or ""


def heuristic_score(proposal: ReviewProposal) -> tuple[float, str]:
    """The documented heuristic (module docstring): ``(score, why)``."""
    text = _text(proposal)
    score, why = BASE, [f"base {BASE:.1f}"]
    if len(proposal.rationale.strip()) >= 20:
        score, why = score + 0.1, [*why, "+0.1 rationale"]
    if 12 <= len(text.strip()) <= 400:
        score, why = score + 0.1, [*why, "+0.1 specific length"]
    policy = POLICY_WORDS.search(text)
    if policy:
        score, why = score - 0.3, [*why, f"−0.3 states a rule or permission ({policy.group(0)!r})"]
    return round(min(1.0, max(0.0, score)), 2), "server heuristic: " + ", ".join(why)


def model_score(proposal: ReviewProposal) -> tuple[float, str]:
    """The review model's score; ``ValueError``/``llm.LLMError`` when it cannot give one."""
    write = {"target": proposal.target, "op": proposal.op, "text": _text(proposal), "rationale": proposal.rationale}
    with usage.context(purpose="review", prompt=SCORE_PROMPT.name, version=SCORE_PROMPT.version):
        result = llm.chat(
            [{"role": "system", "content": PROMPT}, {"role": "user", "content": json.dumps(write, ensure_ascii=False)}],
            temperature=0.0,
        )
    # A real model's reply: a <think> block first, a fence, a sentence around the object (lessonboard.llm.replies).
    data = replies.extract_json(result.text).value
    score = data.get("score") if isinstance(data, dict) else None
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0.0 <= _number(score) <= 1.0:
        raise ValueError(f"no score from 0 to 1 in the review model's reply: {result.text[:200]!r}")
    reason = str(data.get("reason") or "")[:300]
    return round(float(score), 2), f"review model {result.model}: {reason}".rstrip(": ")


def _number(score: int | float) -> float:
    """The score as a float; an integer too large for one is out of range, not an OverflowError."""
    try:
        return float(score)
    except OverflowError:
        return float("inf")


def server_score(proposal: ReviewProposal, *, model: bool = True) -> tuple[float, str]:
    """The review model's score when an LLM is configured (and ``model``), else (or when it fails) the
    heuristic."""
    if model and llm.is_configured():
        try:
            return model_score(proposal)
        except (llm.LLMError, ValueError) as exc:
            log.warning("review: the review model could not score a proposal (%s); the heuristic does", exc)
            score, why = heuristic_score(proposal)
            return score, f"{why} (the review model could not score it)"
    return heuristic_score(proposal)


def rescored(proposal: ReviewProposal, *, model: bool = True) -> ReviewProposal:
    """``proposal`` with the server's score, the agent's own kept as ``agent_score`` (advisory);
    ``model=False``: the heuristic's, without asking the review model."""
    score, why = server_score(proposal, model=model)
    return proposal.model_copy(update={"agent_score": proposal.score, "score": score, "score_reason": why})
