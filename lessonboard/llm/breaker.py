"""The LLM circuit breaker (docs/operations.md#llm-outage), shared by every process through one row per
endpoint (``lessonboard.models.LLMBreaker``).

- closed: calls go through; every outage error (connection error, timeout, 5xx) adds one to a count of
  consecutive failures, any answer from the endpoint resets it. At LLM_BREAKER_THRESHOLD it opens.
- open: the gateway refuses calls at once (``LLMUnreachable``); lesson jobs, refine runs and reviews wait
  instead of spending attempts. Beat runs ``probe`` every LLM_BREAKER_PROBE_INTERVAL.
- half-open: one process holds the probe (claimed by a conditional UPDATE, so only one probes); an
  answer closes the breaker and runs the recovery hooks (the sweeper dispatches what waited), another
  outage error opens it again until the next probe is due.

Bookkeeping never turns an LLM reply into an error: when the database cannot be read or written the
breaker counts as closed and the call's own outcome stands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from lessonboard.llm import usage
from lessonboard.llm.errors import LLMError, LLMRateLimited, LLMSaturated
from lessonboard.metrics import LLM_BREAKER_RECOVERIES, LLM_BREAKER_TRIPS
from lessonboard.models import BreakerState, LLMBreaker

log = logging.getLogger(__name__)

OPEN_STATES = (BreakerState.OPEN, BreakerState.HALF_OPEN)
ERROR_CHARS = 2000

# Called after the breaker closes (apps append from AppConfig.ready(): dispatch what waited).
RECOVERY_HOOKS: list[Callable[[], None]] = []


@dataclass(frozen=True)
class Outage:
    """What an open breaker tells people: since when, the last error, how many failures and probes."""

    since: datetime
    last_error: str
    failures: int
    probes: int
    next_probe_at: datetime | None

    @property
    def text(self) -> str:
        since = timezone.localtime(self.since).strftime("%Y-%m-%d %H:%M:%S %Z")
        return f"LLM unreachable since {since} — last error: {self.last_error}"


def endpoint() -> str:
    return str(settings.LLM_BASE_URL or "")


def outage() -> Outage | None:
    """The current outage of the configured endpoint, or ``None`` when calls may go through."""
    key = endpoint()
    if not key:
        return None
    try:
        row = LLMBreaker.objects.filter(pk=key, state__in=OPEN_STATES).first()
    except Exception as exc:  # database down or not reachable from here: the breaker counts as closed
        log.debug("llm breaker: cannot read state: %s", exc)
        return None
    if row is None:
        return None
    return _outage_of(row)


def is_open() -> bool:
    return outage() is not None


def _outage_of(row: LLMBreaker) -> Outage:
    return Outage(
        since=row.opened_at or row.last_error_at or timezone.now(),
        last_error=row.last_error,
        failures=row.failures,
        probes=row.probes,
        next_probe_at=row.probe_at,
    )


def gate() -> LLMBreaker | None:
    """The endpoint's row when a call may have to wait (the breaker open, or a rate limit on), else
    ``None``: the gateway's one read before every call (no row matches on the healthy path)."""
    key = endpoint()
    if not key:
        return None
    try:
        return LLMBreaker.objects.filter(pk=key).filter(Q(state__in=OPEN_STATES) | Q(rate_limits__gt=0)).first()
    except Exception as exc:  # database down or not reachable from here: the breaker counts as closed
        log.debug("llm breaker: cannot read state: %s", exc)
        return None


def record_failure(message: str, *, now: datetime | None = None) -> bool:
    """Count one outage error; open the breaker at the threshold. Returns whether it is open now."""
    key = endpoint()
    if not key:
        return False
    now = now or timezone.now()
    try:
        with transaction.atomic():  # a savepoint when called inside a transaction: a failure stays here
            LLMBreaker.objects.get_or_create(pk=key)
        return _count_failure(key, message, now)
    except Exception as exc:
        log.warning("llm breaker: cannot record a failure: %s", exc)
        return False


def _count_failure(key: str, message: str, now: datetime) -> bool:
    with transaction.atomic():
        LLMBreaker.objects.filter(pk=key).update(
            failures=F("failures") + 1, last_error=message[:ERROR_CHARS], last_error_at=now
        )
        tripped = LLMBreaker.objects.filter(
            pk=key, state=BreakerState.CLOSED, failures__gte=settings.LLM_BREAKER_THRESHOLD
        ).update(
            state=BreakerState.OPEN,
            opened_at=now,
            probe_at=now + timedelta(seconds=settings.LLM_BREAKER_PROBE_INTERVAL),
            probes=0,
            trips=F("trips") + 1,
        )
    if tripped:
        LLM_BREAKER_TRIPS.inc()
        log.warning(
            "llm breaker: opened for %s after %d consecutive failures: %s", key, settings.LLM_BREAKER_THRESHOLD, message
        )
    return LLMBreaker.objects.filter(pk=key, state__in=OPEN_STATES).exists()


def record_success(*, now: datetime | None = None) -> bool:
    """The endpoint answered: reset the count, close the breaker. Returns whether this closed it."""
    key = endpoint()
    if not key:
        return False
    now = now or timezone.now()
    try:
        closed = _reset(key, now)
        if not closed:
            return False
    except Exception as exc:
        log.warning("llm breaker: cannot record a success: %s", exc)
        return False
    LLM_BREAKER_RECOVERIES.inc()
    log.warning("llm breaker: %s answers again; closed, dispatching what waited", key)
    for hook in RECOVERY_HOOKS:
        try:
            hook()
        except Exception:
            log.exception("llm breaker: a recovery hook failed (the periodic sweeps will catch up)")
    return True


# Every successful LLM call records its success, so the healthy path is one statement that matches no
# row (closed, no failures counted, no rate limit on) and writes nothing; the ``closed_at`` it returns
# tells whether this call is the one that closed the breaker. An answer also lifts a rate limit.
RESET_SQL = """
UPDATE lessonboard_llmbreaker SET
  failures = 0,
  state = %(closed)s,
  probe_at = CASE WHEN state = ANY(%(open)s) THEN NULL ELSE probe_at END,
  closed_at = CASE WHEN state = ANY(%(open)s) THEN %(now)s ELSE closed_at END,
  rate_limits = 0,
  paused_until = NULL,
  rate_limited_since = NULL
WHERE endpoint = %(key)s AND (state = ANY(%(open)s) OR failures > 0 OR rate_limits > 0)
RETURNING closed_at = %(now)s
"""


def _reset(key: str, now: datetime) -> bool:
    """Reset the failure count and close the breaker; whether it was open (or half-open) until now."""
    params = {"closed": BreakerState.CLOSED.value, "open": [s.value for s in OPEN_STATES], "now": now, "key": key}
    conn = transaction.get_connection()
    # Inside a caller's transaction a failure here must not abort it: a savepoint then.
    with transaction.atomic() if conn.in_atomic_block else nullcontext(), conn.cursor() as cursor:
        cursor.execute(RESET_SQL, params)
        row = cursor.fetchone()
    return bool(row and row[0])


# The probe's call and the configured check, handed in by the gateway when it loads (it calls the breaker,
# so the breaker does not import it back).
_probe_call: dict[str, Callable[..., Any]] = {}


def use_for_probes(*, ping: Callable[..., Any], is_configured: Callable[[], bool]) -> None:
    _probe_call.update(ping=ping, is_configured=is_configured)


def probe(*, now: datetime | None = None) -> str:
    """Half-open probe, when one is due: one small chat call. Only one process probes at a time."""
    key = endpoint()
    if not key or not _probe_call or not _probe_call["is_configured"]():
        return "not configured"
    now = now or timezone.now()
    interval = timedelta(seconds=settings.LLM_BREAKER_PROBE_INTERVAL)
    try:
        claimed = LLMBreaker.objects.filter(pk=key, state__in=OPEN_STATES, probe_at__lte=now).update(
            state=BreakerState.HALF_OPEN, probe_at=now + interval, probes=F("probes") + 1
        )
    except Exception as exc:
        log.warning("llm breaker: cannot claim the probe: %s", exc)
        return "error"
    if not claimed:
        return "open" if is_open() else "closed"
    try:
        with usage.context(purpose="probe", prompt="ping", version="ping-v1"):  # lessonboard/llm/prompts/ping-v1.txt
            _probe_call["ping"](timeout=settings.LLM_BREAKER_PROBE_TIMEOUT)
    except LLMRateLimited as exc:
        # Reachable, but a rate limit is no answer: the breaker stays open until a probe is answered.
        LLMBreaker.objects.filter(pk=key, state=BreakerState.HALF_OPEN).update(state=BreakerState.OPEN)
        log.info("llm breaker: probe rate-limited, still open: %s", exc.message)
        return "open"
    except LLMSaturated as exc:
        # No slot for it, so no call was made: nothing was learnt; the next probe is due an interval on.
        LLMBreaker.objects.filter(pk=key, state=BreakerState.HALF_OPEN).update(state=BreakerState.OPEN)
        log.info("llm breaker: no slot for the probe, still open: %s", exc.message)
        return "open"
    except LLMError as exc:
        if exc.outage:
            LLMBreaker.objects.filter(pk=key, state=BreakerState.HALF_OPEN).update(state=BreakerState.OPEN)
            log.info("llm breaker: probe failed, still open: %s", exc.message)
            return "open"
    return "closed"  # the gateway recorded the answer, which closed the breaker


def claim_trial(*, now: datetime | None = None) -> bool:
    """While open, let one real call through as the half-open trial once a probe is due (the same claim
    as ``probe``'s), so the breaker closes from a call that succeeds even when no probe runs."""
    key = endpoint()
    if not key:
        return False
    now = now or timezone.now()
    try:
        return bool(
            LLMBreaker.objects.filter(pk=key, state__in=OPEN_STATES, probe_at__lte=now).update(
                state=BreakerState.HALF_OPEN,
                probe_at=now + timedelta(seconds=settings.LLM_BREAKER_PROBE_INTERVAL),
                probes=F("probes") + 1,
            )
        )
    except Exception as exc:
        log.warning("llm breaker: cannot claim a trial call: %s", exc)
        return False
