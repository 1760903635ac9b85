"""Every chat call recorded (``lessonboard.models.LLMCall``): purpose, model, tokens, latency, outcome,
cost, workspace, agent, and the prompt's name and version.

Callers say what a call is for with ``context(purpose=…, workspace=…, agent=…, prompt=…, version=…)``
around it (a context variable, so the gateway's signature stays as it is); the gateway records the call
when it ends, answered or not. Tokens come from the answer's ``usage``; a server that sends none gets an
estimate (characters / 4) marked ``tokens_estimated``. Cost comes from LESSONBOARD_LLM_PRICES,
``model=input/output`` in currency units per million tokens. Recording never turns a call into an error.
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


def cost(model: str, prompt_tokens: int, completion_tokens: int) -> Decimal:
    price = prices().get(model) or prices().get("*")
    if price is None:
        return Decimal(0)
    return (price[0] * prompt_tokens + price[1] * completion_tokens) / Decimal(1_000_000)


def estimate_tokens(text: str) -> int:
    return max((len(text) + 3) // 4, 1) if text else 0


def record(
    *,
    model: str,
    messages: list[dict[str, str]],
    text: str = "",
    usage: Any = None,
    latency: float,
    outcome: str,
    error: str = "",
) -> None:
    """One row and the counters for a call that just ended."""
    from lessonboard.metrics import LLM_CALLS, LLM_COST, LLM_TOKENS
    from lessonboard.models import LLMCall

    ctx = _CONTEXT.get()
    prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    estimated = usage is None and outcome in ("ok", "truncated")
    if estimated:
        prompt_tokens = sum(estimate_tokens(m.get("content", "")) for m in messages)
        completion_tokens = estimate_tokens(text)
    spent = cost(model, prompt_tokens, completion_tokens)
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
