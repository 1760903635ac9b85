"""The LLM gateway: every chat and embeddings call goes through here, through the ``openai`` client,
against any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp, LM Studio…).

Errors come out as exactly two classes so callers can decide retry vs give up without knowing the
provider: ``TransientLLMError`` (timeouts, connection errors, 408/409/425/429, 5xx, garbled bodies) and
``PermanentLLMError`` (any other 4xx, missing configuration). Both carry the provider's message.
The client never retries by itself (``max_retries=0``): the callers' queues own retry and backoff, and
record every attempt.

A rate limit (429, or a 503 naming ``Retry-After``) is ``LLMRateLimited``: neither an outage nor an answer
for the breaker; it pauses every call to the endpoint for the wait the provider names
(``lessonboard.llm.ratelimit``), and callers wait without spending attempts.

Errors that say the endpoint is down for everyone (connection errors, timeouts, 5xx) are ``outage``
errors: they feed the shared circuit breaker (``lessonboard.llm.breaker``). While it is open, calls fail at
once with ``LLMUnreachable`` and callers wait instead of spending attempts (docs/operations.md#llm-outage).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import openai
from django.conf import settings

from lessonboard.llm import limiter, promptfiles, ratelimit
from lessonboard.llm import usage as usage_log
from lessonboard.llm.errors import (
    LLMError,
    LLMNotConfigured,
    LLMRateLimited,
    LLMSaturated,
    LLMUnreachable,
    PermanentLLMError,
    TransientLLMError,
)

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
PING_PROMPT = promptfiles.load(Path(__file__).resolve().parent / "prompts", "ping-v1")  # the breaker's probe
T = TypeVar("T")


@dataclass(frozen=True)
class ChatResult:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def is_configured() -> bool:
    """True when a base URL and a model are set (the API key may be empty for local servers)."""
    return bool(settings.LLM_BASE_URL and settings.LLM_MODEL)


def status_text() -> str:
    if is_configured():
        return f"{settings.LLM_MODEL} at {settings.LLM_BASE_URL}"
    return "no LLM configured (set LESSONBOARD_LLM_BASE_URL and LESSONBOARD_LLM_MODEL)"


def unavailable_reason() -> str:
    """Why work that needs the LLM must wait now ("" when it may run): none configured, or an outage."""
    from lessonboard.llm import breaker  # lazily: it reads the models, which a spawned embedder has not

    if not is_configured():
        return status_text()
    outage = breaker.outage()
    return outage.text if outage is not None else ""


def availability() -> tuple[str, Any]:
    """``(reason, pause)`` in one read of the breaker row: why work that needs the LLM must wait undispatched
    ("" when it may run), and the rate-limit pause in force (``ratelimit.Pause``) or ``None``."""
    from lessonboard.llm import breaker  # lazily: it reads the models, which a spawned embedder has not

    if not is_configured():
        return status_text(), None
    from django.utils import timezone

    row = breaker.gate()
    if row is None:
        return "", None
    if row.state in breaker.OPEN_STATES:
        return breaker._outage_of(row).text, None
    if row.rate_limits > 0 and row.paused_until is not None and row.paused_until > timezone.now():
        return "", ratelimit._pause_of(row)
    return "", None


def _refuse_while_paused(row: Any, *, claim: bool = True) -> None:
    """``LLMRateLimited`` (``paused``: no call made) while the endpoint's rate-limit pause is on. Once it has
    run out, ``claim`` claims the trial for this caller (the others keep waiting); without it the caller goes
    on and claims it later (a chat call, once it holds its slot)."""
    if row is None or row.rate_limits <= 0:
        return
    pause = ratelimit.admit(row) if claim else ratelimit.in_force(row)
    if pause is not None:
        raise LLMRateLimited(pause.text, retry_after=pause.seconds(), paused=True)


def _pause(exc: LLMRateLimited) -> None:
    """Pause every call to the endpoint for the wait a rate-limit answer names (``exc.retry_after`` becomes
    the pause's length). Neither an outage nor an answer: the breaker's count stays as it is."""
    pause = ratelimit.record(exc.message, exc.retry_after)
    if pause is not None:
        exc.retry_after = pause.seconds()


def _guarded(call: Callable[[bool], T], *, probe: bool = False, claim: bool = True) -> T:
    """Run one provider call through the breaker and the rate limit: refuse it while the breaker is open
    (unless it is the probe) or a rate-limit pause is on, count outage errors, and reset the count (and
    lift a pause) on any answer. ``call`` pauses the endpoint itself on a rate-limit answer (``_pause``).
    With ``claim=False`` (``chat``: it may wait for a slot first) a pause that has run out is not claimed
    here: ``call`` gets True and claims the trial itself, just before its request."""
    from lessonboard.llm import breaker  # lazily: it reads the models, which a spawned embedder has not

    limited = False
    if not probe:
        row = breaker.gate()
        if row is not None and row.state in breaker.OPEN_STATES and not breaker.claim_trial():
            raise LLMUnreachable(breaker._outage_of(row).text)  # a due probe lets this real call try
        _refuse_while_paused(row, claim=claim)
        limited = not claim and row is not None and row.rate_limits > 0
    try:
        result = call(limited)
    except LLMRateLimited:
        raise  # neither an outage nor an answer: the breaker's count stays as it is
    except LLMError as exc:
        if exc.outage:
            breaker.record_failure(exc.message)
        elif not isinstance(exc, LLMNotConfigured | LLMSaturated):
            breaker.record_success()  # the endpoint answered (a 400, a garbled body): it is reachable
        raise
    breaker.record_success()
    return result


@functools.lru_cache(maxsize=8)
def _client(base_url: str, api_key: str, timeout: float) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout, max_retries=0)


def client(*, timeout: float | None = None) -> openai.OpenAI:
    if not settings.LLM_BASE_URL:
        raise LLMNotConfigured("no LLM configured: set LESSONBOARD_LLM_BASE_URL (and LESSONBOARD_LLM_MODEL)")
    return _client(settings.LLM_BASE_URL, settings.LLM_API_KEY, float(timeout or settings.LLM_TIMEOUT))


def chat(
    messages: list[dict[str, str]],
    *,
    model: str | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    timeout: float | None = None,
    probe: bool = False,
) -> ChatResult:
    """One chat completion; returns the first choice's text. ``probe``: the breaker's half-open probe,
    the one call let through while it is open."""
    model = model or settings.LLM_MODEL
    if not model:
        raise LLMNotConfigured("no LLM model configured: set LESSONBOARD_LLM_MODEL")
    api = client(timeout=timeout)
    chosen = model

    def create(limited: bool) -> Any:
        from lessonboard.llm import breaker  # lazily: it reads the models, which a spawned embedder has not

        # One of the node's slots for the call's length; its outcome adapts the node's limit (AIMD).
        with limiter.slot(chosen) as held:
            if limited or (held.waited and not probe):
                # The trial of a pause that ran out is claimed here, with the slot held; and a pause may
                # have begun while this call waited for its slot: a queue of waiting calls must not fire
                # into it. (A call that found a slot free at once adds no read to the healthy path.)
                _refuse_while_paused(breaker.gate())
            try:
                response = api.chat.completions.create(
                    model=chosen,
                    messages=messages,  # type: ignore[arg-type]
                    max_tokens=max_tokens or settings.LLM_MAX_TOKENS,
                    temperature=settings.LLM_TEMPERATURE if temperature is None else temperature,
                )
            except openai.OpenAIError as exc:
                error = classify(exc)
                if isinstance(error, LLMRateLimited) or isinstance(exc, openai.APITimeoutError):
                    held.outcome = "overload"
                if isinstance(error, LLMRateLimited):
                    _pause(error)  # before the slot is given back: the call waiting for it sees the pause
                raise error from exc
            except ValueError as exc:  # the client decodes the body itself: a garbled one surfaces as ValueError
                raise TransientLLMError(f"malformed chat response from provider: {exc}") from exc
            held.outcome = "answered"
            return response

    started = time.monotonic()
    try:
        response = _guarded(create, probe=probe, claim=False)
        choice = response.choices[0]
        text = _content_text(choice.message.content)
    except LLMError as exc:
        # Refused before the provider was asked (breaker open, pause on, no slot): no call to record.
        if not isinstance(exc, LLMUnreachable | LLMSaturated | LLMNotConfigured) and not getattr(exc, "paused", False):
            outcome = "rate_limited" if isinstance(exc, LLMRateLimited) else "error"
            usage_log.record(
                model=chosen, messages=messages, latency=time.monotonic() - started, outcome=outcome, error=exc.message
            )
        raise
    except (AttributeError, IndexError, TypeError) as exc:
        usage_log.record(
            model=chosen, messages=messages, latency=time.monotonic() - started, outcome="error", error=str(exc)
        )
        raise TransientLLMError(f"malformed chat response from provider: {exc}") from exc
    usage = getattr(response, "usage", None)
    finish = getattr(choice, "finish_reason", None)
    usage_log.record(
        model=getattr(response, "model", None) or chosen,
        asked=chosen,
        messages=messages,
        text=text,
        usage=usage,
        latency=time.monotonic() - started,
        outcome="truncated" if finish == "length" else "ok",
    )
    return ChatResult(
        text=text,
        model=getattr(response, "model", None) or model,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        finish_reason=getattr(choice, "finish_reason", None),
    )


def _content_text(content: Any) -> str:
    """A message's text: the string, or the text of its ``"text"`` parts joined when the provider sends a
    list of content parts (``[{"type": "text", "text": "…"}]``); other parts (images, audio) are skipped.
    ``TypeError`` for anything else: a malformed answer."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise TypeError(f"message content is a {type(content).__name__}, not text")
    texts = []
    for part in content:
        if not isinstance(part, dict):
            raise TypeError(f"message content part is a {type(part).__name__}, not an object")
        if part.get("type") == "text":
            if not isinstance(part.get("text"), str):
                raise TypeError("message content part of type text has no text")
            texts.append(part["text"])
    return "".join(texts)


def embed(texts: list[str], *, model: str, timeout: float | None = None) -> list[list[float]]:
    """Embeddings for ``texts`` from the configured OpenAI-compatible endpoint, in input order."""
    api = client(timeout=timeout)

    def create(limited: bool) -> Any:  # ``limited`` is always False here: ``_guarded`` claims the trial
        try:
            return api.embeddings.create(model=model, input=texts)
        except openai.OpenAIError as exc:
            error = classify(exc)
            if isinstance(error, LLMRateLimited):
                _pause(error)
            raise error from exc
        except ValueError as exc:
            raise TransientLLMError(f"malformed embeddings response from provider: {exc}") from exc

    response = _guarded(create)
    try:
        rows = sorted(response.data, key=lambda item: item.index)
        vectors = [list(map(float, row.embedding)) for row in rows]
    except (AttributeError, TypeError, ValueError) as exc:
        raise TransientLLMError(f"malformed embeddings response from provider: {exc}") from exc
    if len(vectors) != len(texts):
        raise TransientLLMError(f"provider returned {len(vectors)} embeddings for {len(texts)} inputs")
    return vectors


def ping(*, timeout: float) -> ChatResult:
    """The breaker's probe: the smallest chat call the endpoint must answer."""
    text = PING_PROMPT.text
    return chat([{"role": "user", "content": text}], max_tokens=1, temperature=0.0, timeout=timeout, probe=True)


def classify(exc: BaseException) -> LLMError:
    """Map an ``openai`` exception to the gateway's two classes, keeping the provider's message."""
    if isinstance(exc, LLMError):
        return exc
    if isinstance(exc, openai.APITimeoutError):
        return TransientLLMError(f"LLM request timed out: {exc}", outage=True)
    if isinstance(exc, openai.APIConnectionError):
        return TransientLLMError(f"cannot reach the LLM endpoint: {exc}", outage=True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = _provider_message(exc)
        named = ratelimit.wait_named(getattr(exc.response, "headers", None))
        if status == 429 or (status == 503 and named is not None):
            return LLMRateLimited(
                f"LLM endpoint answered {status} (rate limited): {message}", status=status, retry_after=named
            )
        if status >= 500:
            return TransientLLMError(f"LLM endpoint answered {status}: {message}", status=status, outage=True)
        if status in TRANSIENT_STATUSES:
            return TransientLLMError(f"LLM endpoint answered {status}: {message}", status=status)
        return PermanentLLMError(f"LLM endpoint answered {status}: {message}", status=status)
    if isinstance(exc, openai.APIResponseValidationError):
        return TransientLLMError(f"malformed response from provider: {exc}")
    return TransientLLMError(f"LLM call failed: {exc}")


def _provider_message(exc: openai.APIStatusError) -> str:
    body: Any = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return exc.message
