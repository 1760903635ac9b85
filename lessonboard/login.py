"""Login throttling around django-axes: which address a login comes from, and the audit trail of
lockouts and unlocks (docs/security.md#login-throttling)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import QuerySet
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


def _pair(username: str | None, ip_address: str | None) -> dict[str, Any]:
    return {"object_type": "user", "object_ids": [username or ""], "result__ip_address": ip_address}


def record_lockout(
    sender: Any, *, request: HttpRequest, username: str | None, ip_address: str | None, **kwargs: Any
) -> None:
    """Audit a lockout once per lock-out period of a pair: axes signals again on every refused try."""
    since = timezone.now() - timedelta(hours=settings.AXES_COOLOFF_TIME)
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
