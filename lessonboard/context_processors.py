from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

# (label, url name, permission needed or None). An entry shows only once its page exists (its URL
# name resolves) and the user may see it: later issues add pages, never stubs.
NAV: list[tuple[str, str, str | None]] = [
    ("Overview", "overview", None),
    ("Lessons", "lessons:search", None),
    ("Queue", "queue:index", None),
    ("Reviews", "reviews:queue", "lessonboard.review_memory"),
    ("Refine", "refine:runs", None),
    ("Audit", "audit:list", None),
    ("Admin", "admin:index", "is_staff"),
]


def navigation(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav": []}
    items = []
    for label, name, perm in NAV:
        if perm == "is_staff" and not user.is_staff:
            continue
        if perm and perm != "is_staff" and not user.has_perm(perm):
            continue
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        items.append(
            {"label": label, "url": url, "active": request.path == url or (url != "/" and request.path.startswith(url))}
        )
    return {"nav": items}
