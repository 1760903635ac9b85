"""The LLM gateway: every chat and embeddings call goes through here, through the ``openai`` client,
against any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp, LM Studio…).

Errors come out as exactly two classes so callers can decide retry vs give up without knowing the
provider: ``TransientLLMError`` (timeouts, connection errors, 408/409/425/429, 5xx, garbled bodies) and
``PermanentLLMError`` (any other 4xx, missing configuration). Both carry the provider's message.
The client never retries by itself (``max_retries=0``): the callers' queues own retry and backoff, and
record every attempt.

Errors that say the endpoint is down for everyone (connection errors, timeouts, 5xx) are ``outage``
errors: they feed the shared circuit breaker (``lessonboard.breaker``). While it is open, calls fail at
once with ``LLMUnreachable`` and callers wait instead of spending attempts (docs/operations.md#llm-outage).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import openai
from django.conf import settings

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
T = TypeVar("T")


class LLMError(Exception):
    """Base class; ``message`` is the provider's (or our) explanation, ``status`` the HTTP status if any."""

    transient = False

    def __init__(self, message: str, *, status: int | None = None, outage: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        # The endpoint is down or failing for every request (not this request's fault): feeds the breaker.
        self.outage = outage


class TransientLLMError(LLMError):
    transient = True


class PermanentLLMError(LLMError):
    pass


class LLMNotConfigured(PermanentLLMError):
    pass


class LLMUnreachable(TransientLLMError):
    """The breaker is open: the call was not made. Work that needs the LLM waits for it to close."""

    def __init__(self, message: str) -> None:
        super().__init__(message, outage=True)


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
    if not is_configured():
        return status_text()
    from lessonboard import breaker

    outage = breaker.outage()
    return outage.text if outage is not None else ""


def _guarded(call: Callable[[], T], *, probe: bool = False) -> T:
    """Run one provider call through the breaker: refuse it while the breaker is open (unless it is the
    probe), count outage errors, and reset the count on any answer."""
    from lessonboard import breaker

    if not probe:
        outage = breaker.outage()
        if outage is not None and not breaker.claim_trial():  # a due probe lets this real call try
            raise LLMUnreachable(outage.text)
    try:
        result = call()
    except LLMError as exc:
        if exc.outage:
            breaker.record_failure(exc.message)
        elif not isinstance(exc, LLMNotConfigured):
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

    def create() -> Any:
        try:
            return api.chat.completions.create(
                model=chosen,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=max_tokens or settings.LLM_MAX_TOKENS,
                temperature=settings.LLM_TEMPERATURE if temperature is None else temperature,
            )
        except openai.OpenAIError as exc:
            raise classify(exc) from exc
        except ValueError as exc:  # the client decodes the body itself: a garbled one surfaces as ValueError
            raise TransientLLMError(f"malformed chat response from provider: {exc}") from exc

    response = _guarded(create, probe=probe)
    try:
        choice = response.choices[0]
        text = choice.message.content or ""
    except (AttributeError, IndexError, TypeError) as exc:
        raise TransientLLMError(f"malformed chat response from provider: {exc}") from exc
    usage = getattr(response, "usage", None)
    return ChatResult(
        text=text,
        model=getattr(response, "model", None) or model,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        finish_reason=getattr(choice, "finish_reason", None),
    )


def embed(texts: list[str], *, model: str, timeout: float | None = None) -> list[list[float]]:
    """Embeddings for ``texts`` from the configured OpenAI-compatible endpoint, in input order."""
    api = client(timeout=timeout)

    def create() -> Any:
        try:
            return api.embeddings.create(model=model, input=texts)
        except openai.OpenAIError as exc:
            raise classify(exc) from exc
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
    return chat([{"role": "user", "content": "ping"}], max_tokens=1, temperature=0.0, timeout=timeout, probe=True)


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
