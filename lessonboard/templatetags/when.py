"""Times on pages: one relative wording ("just now", "5 minutes ago", "in 2 minutes") beside one absolute
format (``Y-m-d H:i:s`` in the ``title``), instead of "0 minutes ago" and a mix of formats."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

register = template.Library()

JUST_NOW = 60  # seconds either side of now that read as "just now"


@register.filter
def ago(value: datetime | None) -> str:
    if not value:
        return "—"
    delta = (timezone.now() - value).total_seconds()
    if abs(delta) < JUST_NOW:
        return "just now" if delta >= 0 else "in under a minute"
    if delta < 0:
        return f"in {timeuntil(value)}"
    return f"{timesince(value)} ago"
