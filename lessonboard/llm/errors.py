"""The gateway's errors (docs/operations.md#llm-outage): what every caller of ``lessonboard.llm`` catches.
Apart from the gateway so the breaker and the limiter raise and catch them without importing it."""

from __future__ import annotations


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


class LLMRateLimited(TransientLLMError):
    """The provider said slow down (429, or 503 with ``Retry-After``), or a pause it asked for is still on
    and the call was not made (``paused``). ``retry_after``: seconds until calls may go again."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None, paused: bool = False
    ) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after
        self.paused = paused


class LLMSaturated(TransientLLMError):
    """Every one of the node's call slots for the model is taken (``lessonboard.llm.limiter``) and the
    caller could wait no longer (a web request does not wait at all): the call was not made."""
