"""The LLM gateway: every chat and embeddings call goes through here, through the ``openai`` client,
against any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp, LM Studio…).

Errors come out as exactly two classes so callers can decide retry vs give up without knowing the
provider: ``TransientLLMError`` (timeouts, connection errors, 408/409/425/429, 5xx, garbled bodies) and
``PermanentLLMError`` (any other 4xx, missing configuration). Both carry the provider's message.
The client never retries by itself (``max_retries=0``): the callers' queues own retry and backoff, and
record every attempt.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import openai
from django.conf import settings

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})


class LLMError(Exception):
    """Base class; ``message`` is the provider's (or our) explanation, ``status`` the HTTP status if any."""

    transient = False

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class TransientLLMError(LLMError):
    transient = True


class PermanentLLMError(LLMError):
    pass


class LLMNotConfigured(PermanentLLMError):
    pass


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
) -> ChatResult:
    """One chat completion; returns the first choice's text."""
    model = model or settings.LLM_MODEL
    if not model:
        raise LLMNotConfigured("no LLM model configured: set LESSONBOARD_LLM_MODEL")
    api = client(timeout=timeout)
    try:
        response = api.chat.completions.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=max_tokens or settings.LLM_MAX_TOKENS,
            temperature=settings.LLM_TEMPERATURE if temperature is None else temperature,
        )
    except openai.OpenAIError as exc:
        raise classify(exc) from exc
    except ValueError as exc:  # the client decodes the body itself: a garbled one surfaces as ValueError
        raise TransientLLMError(f"malformed chat response from provider: {exc}") from exc
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
    try:
        response = api.embeddings.create(model=model, input=texts)
    except openai.OpenAIError as exc:
        raise classify(exc) from exc
    except ValueError as exc:
        raise TransientLLMError(f"malformed embeddings response from provider: {exc}") from exc
    try:
        rows = sorted(response.data, key=lambda item: item.index)
        vectors = [list(map(float, row.embedding)) for row in rows]
    except (AttributeError, TypeError, ValueError) as exc:
        raise TransientLLMError(f"malformed embeddings response from provider: {exc}") from exc
    if len(vectors) != len(texts):
        raise TransientLLMError(f"provider returned {len(vectors)} embeddings for {len(texts)} inputs")
    return vectors


def classify(exc: BaseException) -> LLMError:
    """Map an ``openai`` exception to the gateway's two classes, keeping the provider's message."""
    if isinstance(exc, LLMError):
        return exc
    if isinstance(exc, openai.APITimeoutError):
        return TransientLLMError(f"LLM request timed out: {exc}")
    if isinstance(exc, openai.APIConnectionError):
        return TransientLLMError(f"cannot reach the LLM endpoint: {exc}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = _provider_message(exc)
        if status in TRANSIENT_STATUSES or status >= 500:
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
