from prometheus_client import Counter, Histogram

RUNS = Counter("lessonboard_refine_runs_total", "Refine runs finished, by outcome", ["outcome"])
PASSES = Counter(
    "lessonboard_refine_passes_total", "Refine passes, by decision and deciding scorer", ["decision", "decided_by"]
)
PASS_SECONDS = Histogram(
    "lessonboard_refine_pass_seconds",
    "Wall time of one refine pass (LLM call + convergence checks)",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
