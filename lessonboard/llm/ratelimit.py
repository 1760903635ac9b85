"""The provider's rate limit, obeyed as one (docs/operations.md#llm-rate-limit).

A 429, or a 503 that names a ``Retry-After``, is its own error class (``LLMRateLimited``): not an outage
(it does not count toward the breaker) and not an answer (it does not reset the breaker's count). It
pauses every call to that endpoint, from every web and worker process, for the wait the provider names —
``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date, in GMT when it names no zone), or OpenAI's
``x-ratelimit-reset-requests`` / ``-tokens`` (``6m0s``, ``250ms``) — or, when it names none (no header, or
"nan", "inf", a date that does not parse), for LLM_RATE_LIMIT_BACKOFF doubled per consecutive rate-limit
answer; either capped by LLM_RATE_LIMIT_MAX_PAUSE. The state lives on the breaker's row
(``LLMBreaker.paused_until``, ``rate_limits``) so all processes see it.

When the pause runs out, one caller claims a trial (a conditional UPDATE that moves ``paused_until``
TRIAL_SECONDS ahead, as the breaker's probe is claimed) and the others keep waiting: a storm that goes on
costs one call per pause, not one per waiting job. An answer resets the count and lifts the pause. A chat
call looks at the pause before it waits for one of the node's slots, claims the trial only once it holds
one, and looks again if it had to wait for it: a pause that began meanwhile refuses it too (the answer that
starts a pause records it before its slot is given back).
Lesson jobs that meet the pause wait without spending an attempt and come back when it ends
(``lessonq.processing``); reviews answer 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

log = logging.getLogger(__name__)

TRIAL_SECONDS = 2.0  # how long one trial call holds the others off once a pause has run out
ERROR_CHARS = 2000
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


@dataclass(frozen=True)
class Pause:
    """A rate limit in force: no call before ``until``."""

    until: datetime
    since: datetime
    consecutive: int
    hits: int
    last_error: str

    def seconds(self, now: datetime | None = None) -> float:
        return max((self.until - (now or timezone.now())).total_seconds(), 0.0)

    @property
    def text(self) -> str:
        until = timezone.localtime(self.until).strftime("%H:%M:%S")
        return f"LLM rate-limited until {until} ({self.consecutive} in a row) — last answer: {self.last_error}"


def _number(text: str) -> float | None:
    """A number of seconds (or milliseconds) as a header writes it; ``None`` for text or "nan"/"inf", which
    name no wait (a non-finite one would break the pause's arithmetic)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return max(value, 0.0) if math.isfinite(value) else None


def _duration(text: str) -> float | None:
    """OpenAI's reset durations ("1s", "6m0s", "1h2m3.5s", "250ms") or a plain number of seconds."""
    text = text.strip()
    seconds = _number(text)
    if seconds is not None:
        return seconds
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(a + b for a, b in parts) != text:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(number) * scale[unit] for number, unit in parts)


def wait_named(headers: Any, *, now: datetime | None = None) -> float | None:
    """Seconds the provider asks to wait, from its headers; ``None`` when it names none."""
    if headers is None:
        return None
    get = headers.get
    value = get("retry-after-ms")
    if value:
        millis = _number(value)
        if millis is not None:
            return millis / 1000.0
    value = get("retry-after")
    if value:
        seconds = _number(value)
        if seconds is not None:
            return seconds
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: a year too large for C
            when = None
        if when is not None:
            if when.tzinfo is None:  # "-0000" or no zone at all: HTTP dates are in GMT
                when = when.replace(tzinfo=UTC)
            return max((when - (now or timezone.now())).total_seconds(), 0.0)
    waits = []
    for kind in ("requests", "tokens"):
        reset, remaining = get(f"x-ratelimit-reset-{kind}"), get(f"x-ratelimit-remaining-{kind}")
        if reset and (remaining is None or str(remaining).strip() == "0"):
            seconds = _duration(str(reset))
            if seconds is not None:
                waits.append(seconds)
    return max(waits) if waits else None


def pause_seconds(named: float | None, consecutive: int) -> float:
    """The pause for a rate-limit answer: the wait named, else the backoff for the ``consecutive``-th."""
    cap = settings.LLM_RATE_LIMIT_MAX_PAUSE
    if named is not None:
        return min(named, cap)
    # The doubling stops growing long past any cap: the 1,025th 429 in a row would make a float overflow.
    return min(settings.LLM_RATE_LIMIT_BACKOFF * (2 ** min(max(consecutive - 1, 0), 32)), cap)


def _endpoint() -> str:
    return str(settings.LLM_BASE_URL or "")


def _pause_of(row: Any) -> Pause:
    return Pause(
        until=row.paused_until or timezone.now(),
        since=row.rate_limited_since or row.paused_until or timezone.now(),
        consecutive=row.rate_limits,
        hits=row.rate_limit_hits,
        last_error=row.last_rate_limit,
    )


def current(*, now: datetime | None = None) -> Pause | None:
    """The rate limit in force now (the pause ahead, or a trial under way), or ``None``."""
    from lessonboard.models import LLMBreaker

    key = _endpoint()
    if not key:
        return None
    now = now or timezone.now()
    try:
        row = LLMBreaker.objects.filter(pk=key, rate_limits__gt=0, paused_until__gt=now).first()
    except Exception as exc:  # the database is down: the limit counts as lifted, the call's outcome stands
        log.debug("llm rate limit: cannot read state: %s", exc)
        return None
    return _pause_of(row) if row is not None else None


def in_force(row: Any, *, now: datetime | None = None) -> Pause | None:
    """For a breaker row with a rate limit on: the pause still ahead, or ``None`` when it has run out (a
    look that claims nothing: the caller claims the trial with ``admit`` once it is about to call)."""
    now = now or timezone.now()
    if row.paused_until is not None and row.paused_until > now:
        return _pause_of(row)
    return None


def admit(row: Any, *, now: datetime | None = None) -> Pause | None:
    """For a breaker row with a rate limit on: ``None`` when this caller may call now (the pause ran out
    and this caller claimed the trial), else the pause to wait out."""
    from lessonboard.models import LLMBreaker

    now = now or timezone.now()
    if row.paused_until is not None and row.paused_until > now:
        return _pause_of(row)
    try:
        claimed = (
            LLMBreaker.objects.filter(pk=row.pk, rate_limits__gt=0)
            .filter(paused_until__lte=now)
            .update(paused_until=now + timedelta(seconds=TRIAL_SECONDS))
        )
        if claimed:
            return None
        fresh = LLMBreaker.objects.filter(pk=row.pk, rate_limits__gt=0, paused_until__gt=now).first()
    except Exception as exc:
        log.debug("llm rate limit: cannot claim the trial: %s", exc)
        return None
    return _pause_of(fresh) if fresh is not None else None


def record(message: str, named: float | None, *, now: datetime | None = None) -> Pause | None:
    """Count one rate-limit answer and pause the endpoint; returns the pause now in force."""
    from lessonboard.metrics import LLM_RATE_LIMITS
    from lessonboard.models import LLMBreaker

    key = _endpoint()
    if not key:
        return None
    now = now or timezone.now()
    LLM_RATE_LIMITS.inc()
    try:
        with transaction.atomic():
            LLMBreaker.objects.get_or_create(pk=key)
            consecutive = (
                LLMBreaker.objects.select_for_update().filter(pk=key).values_list("rate_limits", flat=True).get()
            ) + 1
            until = now + timedelta(seconds=pause_seconds(named, consecutive))
            LLMBreaker.objects.filter(pk=key).update(
                rate_limits=F("rate_limits") + 1,
                rate_limit_hits=F("rate_limit_hits") + 1,
                last_rate_limit=message[:ERROR_CHARS],
            )
            # A later answer may name a shorter wait than one already in force: the pause never shrinks.
            LLMBreaker.objects.filter(pk=key).exclude(paused_until__gt=until).update(paused_until=until)
            LLMBreaker.objects.filter(pk=key, rate_limited_since__isnull=True).update(rate_limited_since=now)
            row = LLMBreaker.objects.get(pk=key)
    except Exception as exc:
        log.warning("llm rate limit: cannot record it: %s", exc)
        return None
    pause = _pause_of(row)
    log.warning("llm rate limit: %s paused for %.1f s: %s", key, pause.seconds(now), message)
    return pause
