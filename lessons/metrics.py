"""Prometheus series of the lessons app (multiprocess mode: see lessonboard/metrics.py)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

LESSONS_PERSISTED = Counter(
    "lessonboard_lessons_persisted_total",
    "persist_lesson outcomes (created, reinforced, superseded, unchanged).",
    ["action"],
)
LESSONS_EMBEDDED = Counter("lessonboard_lessons_embedded_total", "Lesson vectors computed.", ["model"])
RETRIEVAL_SECONDS = Histogram(
    "lessonboard_lesson_retrieval_seconds",
    "Time of one hybrid lesson search (all branches, query embedding and HyDE included).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
