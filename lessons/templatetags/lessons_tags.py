"""``{{ text|highlight:terms }}``: the text escaped, with the matched query terms in <mark>."""

from __future__ import annotations

import re

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@register.filter
def highlight(text: str, terms: list[str] | None) -> SafeString:
    escaped = str(escape(text))
    words = sorted({str(escape(t)) for t in (terms or []) if len(t) >= 2}, key=len, reverse=True)
    if not words:
        return mark_safe(escaped)  # noqa: S308 - escaped above
    pattern = re.compile(r"(?<![\w])(" + "|".join(re.escape(w) for w in words) + r")\w*", re.IGNORECASE)
    return mark_safe(pattern.sub(lambda m: f"<mark>{m.group(0)}</mark>", escaped))  # noqa: S308 - escaped above
