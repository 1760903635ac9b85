"""``{{ text|highlight:terms }}``: the text escaped, with the matched query terms in <mark>."""

from __future__ import annotations

import re

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()
_ENTITY = re.compile(r"(&#?\w+;)")


@register.filter
def highlight(text: str, terms: list[str] | None) -> SafeString:
    escaped = str(escape(text))
    words = sorted({str(escape(t)) for t in (terms or []) if len(t) >= 2}, key=len, reverse=True)
    if not words:
        return mark_safe(escaped)  # noqa: S308 - escaped above
    pattern = re.compile(r"(?<!\w)(" + "|".join(re.escape(w) for w in words) + r")\w*", re.IGNORECASE)
    # Entities (&amp; &lt; &#x27;) are left whole; only the text between them is marked.
    parts = _ENTITY.split(escaped)
    marked = [p if _ENTITY.fullmatch(p) else pattern.sub(lambda m: f"<mark>{m.group(0)}</mark>", p) for p in parts]
    return mark_safe("".join(marked))  # noqa: S308 - every part was escaped above
