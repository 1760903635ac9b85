"""Times on pages, one way everywhere: ``{{ value|when }}`` renders a ``<time>`` element whose text is the
relative wording ("just now", "5 minutes ago", "in 2 minutes"), whose ``datetime`` is the ISO 8601 instant
and whose ``title`` (the tooltip) is the exact time, ``Y-m-d H:i:s UTC``. ``ago`` is the wording alone.
Exports, JSON and the admin keep their own formats."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince, timeuntil

register = template.Library()

JUST_NOW = 60  # seconds either side of now that read as "just now"
EXACT = "%Y-%m-%d %H:%M:%S UTC"


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


@register.filter
def when(value: datetime | str | None) -> SafeString | str:
    """``<time datetime="2026-12-01T14:03:05+00:00" title="2026-12-01 14:03:05 UTC">5 minutes ago</time>``;
    "—" for no time. A string is parsed as ISO 8601 (a manifest's ``generated_at``); one that is not a
    time is shown as it is."""
    if isinstance(value, str):
        parsed = parse_datetime(value.strip())
        if parsed is None:
            return escape(value) if value else "—"
        value = parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed, UTC)
    if not value:
        return "—"
    utc = value.astimezone(UTC)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>', utc.isoformat(timespec="seconds"), utc.strftime(EXACT), ago(value)
    )
