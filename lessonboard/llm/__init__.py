"""The LLM gateway package: ``gateway`` (the chat and embeddings calls and their error classes, re-exported
here so ``from lessonboard import llm; llm.chat(...)`` reads as before) and ``breaker`` (the shared outage
circuit breaker)."""

from lessonboard.llm.gateway import (
    TRANSIENT_STATUSES,
    ChatResult,
    LLMError,
    LLMNotConfigured,
    LLMRateLimited,
    LLMUnreachable,
    PermanentLLMError,
    TransientLLMError,
    _client,
    _guarded,
    _provider_message,
    availability,
    chat,
    classify,
    client,
    embed,
    is_configured,
    ping,
    status_text,
    unavailable_reason,
)

__all__ = [
    "TRANSIENT_STATUSES",
    "ChatResult",
    "LLMError",
    "LLMNotConfigured",
    "LLMRateLimited",
    "LLMUnreachable",
    "PermanentLLMError",
    "TransientLLMError",
    "_client",
    "_guarded",
    "_provider_message",
    "availability",
    "chat",
    "classify",
    "client",
    "embed",
    "is_configured",
    "ping",
    "status_text",
    "unavailable_reason",
]
