"""Doc reflection series (multiprocess-safe; ``/metrics`` aggregates them)."""

from __future__ import annotations

from prometheus_client import Counter

REFLECT_EVENTS = Counter(
    "lessonboard_reflect_events_total", "Doc reflection events (AIOSON's memory_reflect_* types).", ["event"]
)
