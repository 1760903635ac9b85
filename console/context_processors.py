from __future__ import annotations

from typing import Any

from django.core.cache import cache
from django.db import DatabaseError
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from console import demo, inbox
from lessonboard import embedded
from lessonq.models import Job
from lessons.models import Lesson

# (label, url name, permission needed or None). An entry shows only once its page exists (its URL
# name resolves) and the user may see it, so the navigation never links to a page that is not there.
NAV: list[tuple[str, str, str | None]] = [
    ("Overview", "overview", None),
    ("Lessons", "lessons:search", None),
    ("Queue", "queue:index", None),
    ("Inbox", "inbox", None),
    ("Reviews", "reviews:queue", None),
    ("Refine", "refine:runs", None),
    ("Workspaces", "reflect:workspaces", None),
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
        item = {
            "label": label,
            "url": url,
            "active": request.path == url or (url != "/" and request.path.startswith(url)),
        }
        if name == "inbox":
            try:
                # The inbox page knows its own count; every other page reads the maintained one.
                live = getattr(request, "inbox_count", None)
                item["count"], item["counted"] = (inbox.count_for(user) if live is None else live), True
            except DatabaseError:  # the error page of a database outage still renders, without the count
                pass
        items.append(item)
    try:
        banner = demo_banner()
    except DatabaseError:
        banner = ""
    return {"nav": items, "demo_banner": banner}


def demo_banner() -> str:
    """ "demo" while the demo workspace exists, "empty" on an empty embedded database (a hint to load
    it), else "". Cached: every page asks."""

    state = cache.get("lessonboard:demo-banner")
    if state is None:
        if demo.exists():
            state = "demo"
        elif embedded.in_use() and not Job.objects.exists() and not Lesson.objects.exists():
            state = "empty"
        else:
            state = ""
        cache.set("lessonboard:demo-banner", state, 30)
    return str(state)
