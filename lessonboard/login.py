"""Login throttling around django-axes: which address a login comes from, a second limit per address,
and the audit trail of lockouts and unlocks (docs/security.md#login-throttling)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Q, QuerySet, Sum
from django.http import HttpRequest
from django.utils import timezone

from lessonboard.models import AuditEvent


def client_address(request: HttpRequest) -> str:
    """The address a login comes from. Behind the TLS proxy that is the last ``X-Forwarded-For`` entry
    (the one the proxy itself appended; anything before it is whatever the client claimed)."""
    if settings.BEHIND_TLS_PROXY:
        forwarded = [part.strip() for part in request.headers.get("X-Forwarded-For", "").split(",")]
        if forwarded and forwarded[-1]:
            return forwarded[-1]
    return str(request.META.get("REMOTE_ADDR") or "")


def failures(*, since: Any, **where: Any) -> int:
    """Failed logins counted in axes' rows that match ``where`` (a user and an address, or an address for
    every user name together) and were last touched since ``since``."""
    rows = AccessAttempt.objects.filter(attempt_time__gte=since, **where)
    return int(rows.aggregate(total=Sum("failures_since_start"))["total"] or 0)


class LoginAttemptHandler(AxesDatabaseHandler):  # type: ignore[misc]
    """django-axes' database handler with a second, higher limit per address.

    axes counts failures per user and address (``AXES_LOCKOUT_PARAMETERS``) against one limit. Adding
    ``"ip_address"`` to those parameters would lock an address at the same small limit, and a successful
    login would then forget every failure from that address, so an attacker with an account of their own
    could log in between guesses to reset the count. Here the parameters stay per user and address (a
    success forgets only that pair) and an address whose failures for all users together reach
    ``LOGIN_ADDRESS_FAILURE_LIMIT`` counts as having used up the limit, whichever user it tries next."""

    def get_failures(self, request: Any, credentials: dict[str, Any] | None = None) -> int:
        """The pair's failures, or the whole limit once the address has used up its own."""
        pair = int(super().get_failures(request, credentials))
        since = get_cool_off_threshold(request)
        if failures(ip_address=request.axes_ip_address, since=since) >= settings.LOGIN_ADDRESS_FAILURE_LIMIT:
            return max(pair, int(get_failure_limit(request, credentials)))
        return pair


def _pair(username: str | None, ip_address: str | None) -> dict[str, Any]:
    return {"object_type": "user", "object_ids": [username or ""], "result__ip_address": ip_address}


def record_lockout(
    sender: Any, *, request: HttpRequest, username: str | None, ip_address: str | None, **kwargs: Any
) -> None:
    """Audit a lockout once per lock-out period of a pair, or of an address locked for every user (see
    ``LoginAttemptHandler``): axes signals again on every refused try."""
    since = timezone.now() - timedelta(hours=settings.AXES_COOLOFF_TIME)
    if failures(username=username, ip_address=ip_address, since=since) < settings.AXES_FAILURE_LIMIT:
        _record_address_lockout(ip_address, since=since)
        return
    last = AuditEvent.objects.filter(action__in=("auth.lockout", "auth.unlock"), **_pair(username, ip_address)).first()
    if last is not None and last.action == "auth.lockout" and last.created_at >= since:
        return
    AuditEvent.record(
        "auth.lockout",
        object_type="user",
        object_ids=[username or ""],
        result={"ip_address": ip_address, "failures": settings.AXES_FAILURE_LIMIT},
        reason=f"{settings.AXES_FAILURE_LIMIT} failed logins in a row",
    )


def _record_address_lockout(ip_address: str | None, *, since: Any) -> None:
    """Audit an address locked for every user, once per lock-out period (an unlock of any of its pairs
    starts a new one)."""
    last = AuditEvent.objects.filter(
        Q(action="auth.lockout", object_type="address", object_ids=[ip_address or ""])
        | Q(action="auth.unlock", result__ip_address=ip_address)
    ).first()
    if last is not None and last.action == "auth.lockout" and last.created_at >= since:
        return
    limit = settings.LOGIN_ADDRESS_FAILURE_LIMIT
    AuditEvent.record(
        "auth.lockout",
        object_type="address",
        object_ids=[ip_address or ""],
        result={"ip_address": ip_address, "failures": limit},
        reason=f"{limit} failed logins from this address, all user names together",
    )


def unlock(attempts: QuerySet[AccessAttempt], *, user: Any) -> int:
    """Delete these ``AccessAttempt`` rows, ending their lockouts, and audit who did it."""
    count = 0
    for attempt in attempts:
        username, ip_address = attempt.username, attempt.ip_address
        attempt.delete()
        AuditEvent.record(
            "auth.unlock", user=user, object_type="user", object_ids=[username or ""], result={"ip_address": ip_address}
        )
        count += 1
    return count
