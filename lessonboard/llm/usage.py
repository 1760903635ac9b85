"""Every chat call recorded (``lessonboard.models.LLMCall``): purpose, model, tokens, latency, outcome,
cost, workspace, agent, and the prompt's name and version.

Callers say what a call is for with ``context(purpose=…, workspace=…, agent=…, prompt=…, version=…)``
around it (a context variable, so the gateway's signature stays as it is); the gateway records the call
when it ends, answered or not. Tokens come from the answer's ``usage``; a server that sends none, or one
without the prompt and completion counts, gets an estimate (characters / 4; a ``total_tokens`` it did send
is split between the two as the estimate does) marked ``tokens_estimated``. Cost comes from
LESSONBOARD_LLM_PRICES, ``model=input/output`` in currency units per million tokens, looked up under the
model that answered, else the one asked for (OpenAI answers "gpt-4o-2024-08-06" for "gpt-4o"), else
``*``. Recording never turns a call into an error.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)

PURPOSES = ("lesson", "review", "refine", "hyde", "doc2query", "probe", "other")


@dataclass(frozen=True)
class CallContext:
    purpose: str = "other"
    workspace: str = ""
    agent: str = ""
    prompt: str = ""
    version: str = ""
    job_id: str = ""
    refine_run_id: int | None = None


_CONTEXT: contextvars.ContextVar[CallContext] = contextvars.ContextVar("llm_call_context", default=CallContext())  # noqa: B039 (frozen)


@contextmanager
def context(**fields: Any) -> Iterator[CallContext]:
    """Calls made inside are recorded with these fields (nested contexts add to the outer one)."""
    current = replace(_CONTEXT.get(), **{k: v for k, v in fields.items() if v is not None})
    token = _CONTEXT.set(current)
    try:
        yield current
    finally:
        _CONTEXT.reset(token)


def prices() -> dict[str, tuple[Decimal, Decimal]]:
    """LESSONBOARD_LLM_PRICES as {model: (input, output)} per million tokens; bad items are skipped."""
    table: dict[str, tuple[Decimal, Decimal]] = {}
    for item in settings.LLM_PRICES:
        name, _, value = item.partition("=")
        prompt, _, completion = value.partition("/")
        try:
            table[name.strip()] = (Decimal(prompt.strip() or "0"), Decimal(completion.strip() or "0"))
        except ArithmeticError:
            continue
    return table


def cost(model: str, prompt_tokens: int, completion_tokens: int, *, asked: str = "") -> Decimal:
    """What a call cost at the price of ``model`` (the one that answered), else of ``asked`` (the one asked
    for: a provider answers with a dated name such as "gpt-4o-2024-08-06"), else of ``*``."""
    table = prices()
    price = table.get(model) or table.get(asked) or table.get("*")
    if price is None:
        return Decimal(0)
    return (price[0] * prompt_tokens + price[1] * completion_tokens) / Decimal(1_000_000)


def estimate_tokens(text: str) -> int:
    return max((len(text) + 3) // 4, 1) if text else 0


def _count(usage: Any, name: str) -> int | None:
    """One token count of the answer's ``usage``; ``None`` when it has none (absent, null, not a number)."""
    value = getattr(usage, name, None)
    if value is None:
        return None
    try:
        return max(int(value), 0)
    except (TypeError, ValueError, OverflowError):
        return None


def _tokens(usage: Any, messages: list[dict[str, str]], text: str) -> tuple[int, int]:
    """``(prompt, completion)`` for an answer whose ``usage`` lacks a count. A ``total_tokens`` it sent is
    kept: the missing count is the rest of it, or, both missing, it is split as the estimate splits; any
    count still missing is the estimate (characters / 4)."""
    prompt, completion, total = (_count(usage, name) for name in ("prompt_tokens", "completion_tokens", "total_tokens"))
    guess_prompt = sum(estimate_tokens(m.get("content", "")) for m in messages)
    guess_completion = estimate_tokens(text)
    if total is not None:
        if prompt is None and completion is None:
            guessed = guess_prompt + guess_completion
            prompt = round(total * guess_prompt / guessed) if guessed else total
            completion = total - prompt
        elif prompt is None and completion is not None and completion <= total:
            prompt = total - completion
        elif completion is None and prompt is not None and prompt <= total:
            completion = total - prompt
    return (guess_prompt if prompt is None else prompt, guess_completion if completion is None else completion)


def record(
    *,
    model: str,
    asked: str = "",
    messages: list[dict[str, str]],
    text: str = "",
    usage: Any = None,
    latency: float,
    outcome: str,
    error: str = "",
) -> None:
    """One row and the counters for a call that just ended: ``model`` the one that answered (the row's),
    ``asked`` the one the call asked for (its price when the answer's name has none)."""
    from lessonboard.metrics import LLM_CALLS, LLM_COST, LLM_TOKENS
    from lessonboard.models import LLMCall

    ctx = _CONTEXT.get()
    prompt_tokens = _count(usage, "prompt_tokens")
    completion_tokens = _count(usage, "completion_tokens")
    # An answer without both counts (no ``usage``, ``"usage": {}``, only ``total_tokens``) is estimated.
    estimated = (prompt_tokens is None or completion_tokens is None) and outcome in ("ok", "truncated")
    if estimated:
        prompt_tokens, completion_tokens = _tokens(usage, messages, text)
    prompt_tokens, completion_tokens = prompt_tokens or 0, completion_tokens or 0
    spent = cost(model, prompt_tokens, completion_tokens, asked=asked)
    purpose = ctx.purpose if ctx.purpose in PURPOSES else "other"
    try:
        LLM_CALLS.labels(purpose=purpose, model=model, outcome=outcome).inc()
        LLM_TOKENS.labels(purpose=purpose, model=model, kind="prompt").inc(prompt_tokens)
        LLM_TOKENS.labels(purpose=purpose, model=model, kind="completion").inc(completion_tokens)
        LLM_COST.labels(purpose=purpose, model=model).inc(float(spent))
        LLMCall.objects.create(
            purpose=purpose,
            model=model[:200],
            endpoint=str(settings.LLM_BASE_URL or "")[:500],
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            tokens_estimated=estimated,
            latency_ms=latency * 1000,
            outcome=outcome,
            error=error[:2000],
            cost=spent,
            workspace=ctx.workspace[:100],
            agent=ctx.agent[:200],
            prompt_name=ctx.prompt[:100],
            prompt_version=ctx.version[:100],
            job_id=ctx.job_id[:16],
            refine_run_id=ctx.refine_run_id,
        )
    except Exception as exc:  # bookkeeping: the call's own outcome stands
        log.warning("llm usage: cannot record a call: %s", exc)


def purge(*, now: Any = None) -> int:
    """Delete call records older than LESSONBOARD_LLM_CALL_RETENTION (0 keeps them)."""
    from datetime import timedelta

    from django.utils import timezone

    from lessonboard.models import LLMCall

    keep = settings.LLM_CALL_RETENTION
    if not keep:
        return 0
    cutoff = (now or timezone.now()) - timedelta(seconds=keep)
    deleted, _ = LLMCall.objects.filter(created_at__lt=cutoff).delete()
    return int(deleted)
