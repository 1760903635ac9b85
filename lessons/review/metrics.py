"""Prometheus series of the review pass and the approval queue (multiprocess counters)."""

from __future__ import annotations

from prometheus_client import Counter

PROPOSALS = Counter(
    "lessonboard_review_proposals_total",
    "Review proposals by target and the bucket the pass put them in.",
    ["target", "bucket"],
)
PASS_FAILURES = Counter("lessonboard_review_pass_failures_total", "Review passes that failed, by stage.", ["stage"])
DECISIONS = Counter(
    "lessonboard_review_decisions_total",
    "Reviewer decisions by target, decision and outcome.",
    ["target", "decision", "status"],
)
