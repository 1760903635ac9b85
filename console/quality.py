"""The effective quality settings — Reflexion, the lesson queue, Self-Refine and its convergence cascade,
retrieval — as chatcli's ``/config quality`` lists them: each with its variable, its value in this process,
and the chatcli variable it corresponds to. Read-only: they come from the environment at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

Q = "CHATCLI_QUALITY_"
RQ = Q + "REFLEXION_QUEUE_"
RC = Q + "REFINE_CONVERGENCE_"

# (setting, environment variable, chatcli variable or "")
GROUPS: list[tuple[str, list[tuple[str, str, str]]]] = [
    (
        "Reflexion",
        [
            ("LESSONQ_ENABLED", "LESSONQ_ENABLED", RQ + "ENABLED"),
            ("LESSONQ_ON_ERROR", "LESSONQ_ON_ERROR", Q + "REFLEXION_ON_ERROR"),
            ("LESSONQ_ON_HALLUCINATION", "LESSONQ_ON_HALLUCINATION", Q + "REFLEXION_ON_HALLUCINATION"),
            ("LESSONQ_ON_LOW_QUALITY", "LESSONQ_ON_LOW_QUALITY", Q + "REFLEXION_ON_LOW_QUALITY"),
            ("LESSONQ_LESSONS_DOC", "LESSONQ_LESSONS_DOC", Q + "REFLEXION_DOC"),
        ],
    ),
    (
        "Lesson queue",
        [
            ("LESSONQ_WORKERS", "LESSONQ_WORKERS", RQ + "WORKERS"),
            ("LESSONQ_CAPACITY", "LESSONQ_CAPACITY", RQ + "CAPACITY"),
            ("LESSONQ_DROP_OLDEST", "LESSONQ_DROP_OLDEST", RQ + "DROP_OLDEST"),
            ("LESSONQ_BLOCK_TIMEOUT", "LESSONQ_BLOCK_TIMEOUT", RQ + "BLOCK_TIMEOUT"),
            ("LESSONQ_MAX_ATTEMPTS", "LESSONQ_MAX_ATTEMPTS", RQ + "MAX_ATTEMPTS"),
            ("LESSONQ_INITIAL_DELAY", "LESSONQ_INITIAL_DELAY", RQ + "INITIAL_DELAY"),
            ("LESSONQ_MAX_DELAY", "LESSONQ_MAX_DELAY", RQ + "MAX_DELAY"),
            ("LESSONQ_JITTER", "LESSONQ_JITTER", RQ + "JITTER"),
            ("LESSONQ_JOB_TIMEOUT", "LESSONQ_JOB_TIMEOUT", RQ + "JOB_TIMEOUT"),
            ("LESSONQ_STALE_AFTER", "LESSONQ_STALE_AFTER", RQ + "STALE_AFTER"),
            ("LESSONQ_BASE_DIR", "LESSONQ_BASE_DIR", RQ + "BASE_DIR"),
        ],
    ),
    (
        "Self-Refine",
        [
            ("REFINE_ENABLED", "LESSONBOARD_REFINE_ENABLED", Q + "REFINE_ENABLED"),
            ("REFINE_MAX_PASSES", "LESSONBOARD_REFINE_MAX_PASSES", Q + "REFINE_MAX_PASSES"),
            ("REFINE_MIN_BYTES", "LESSONBOARD_REFINE_MIN_BYTES", Q + "REFINE_MIN_BYTES"),
            ("REFINE_EPSILON", "LESSONBOARD_REFINE_EPSILON", Q + "REFINE_EPSILON"),
            ("REFINE_EXCLUDE", "LESSONBOARD_REFINE_EXCLUDE", Q + "REFINE_EXCLUDE"),
            ("REFINE_MODEL", "LESSONBOARD_REFINE_MODEL", ""),
            ("REFINE_LOOP_TIMEOUT", "LESSONBOARD_REFINE_LOOP_TIMEOUT", ""),
            ("REFINE_REFLEXION_ON_LOW_QUALITY", "LESSONBOARD_REFINE_REFLEXION_ON_LOW_QUALITY", ""),
        ],
    ),
    (
        "Convergence cascade",
        [
            ("REFINE_CONVERGENCE_ENABLED", "LESSONBOARD_REFINE_CONVERGENCE_ENABLED", RC + "ENABLED"),
            ("REFINE_CONVERGENCE_EMBEDDING", "LESSONBOARD_REFINE_CONVERGENCE_EMBEDDING", RC + "EMBEDDING"),
            ("REFINE_CONVERGENCE_STRICT", "LESSONBOARD_REFINE_CONVERGENCE_STRICT", RC + "STRICT"),
            ("REFINE_CHAR_HIGH", "LESSONBOARD_REFINE_CHAR_HIGH", RC + "CHAR_HIGH"),
            ("REFINE_CHAR_LOW", "LESSONBOARD_REFINE_CHAR_LOW", RC + "CHAR_LOW"),
            ("REFINE_JACCARD_HIGH", "LESSONBOARD_REFINE_JACCARD_HIGH", RC + "JACCARD_HIGH"),
            ("REFINE_EMBEDDING_SIM", "LESSONBOARD_REFINE_EMBEDDING_SIM", RC + "EMBEDDING_SIM"),
            ("REFINE_CACHE_SIZE", "LESSONBOARD_REFINE_CACHE_SIZE", RC + "CACHE_SIZE"),
            ("REFINE_CACHE_TTL_MIN", "LESSONBOARD_REFINE_CACHE_TTL_MIN", RC + "CACHE_TTL_MIN"),
            ("REFINE_BREAKER_THRESHOLD", "LESSONBOARD_REFINE_BREAKER_THRESHOLD", RC + "BREAKER_THRESHOLD"),
            ("REFINE_EMBEDDER", "LESSONBOARD_REFINE_EMBEDDER", ""),
        ],
    ),
    (
        "Retrieval and memory writes",
        [
            ("EMBEDDING_PROVIDER", "LESSONBOARD_EMBEDDING_PROVIDER", ""),
            ("RETRIEVAL_HYDE", "LESSONBOARD_RETRIEVAL_HYDE", ""),
            ("RETRIEVAL_WEIGHT_TEXT", "LESSONBOARD_RETRIEVAL_WEIGHT_TEXT", ""),
            ("RETRIEVAL_WEIGHT_VECTOR", "LESSONBOARD_RETRIEVAL_WEIGHT_VECTOR", ""),
            ("REVIEW_THRESHOLD", "LESSONBOARD_REVIEW_THRESHOLD", ""),
            ("REVIEW_GATE", "LESSONBOARD_REVIEW_GATE", ""),
        ],
    ),
]


@dataclass(frozen=True)
class Row:
    setting: str
    variable: str
    chatcli: str
    value: str


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "(none)"
    if value in ("", None):
        return "(empty)"
    return str(value)


def effective() -> list[tuple[str, list[Row]]]:
    """Every group with its rows and the values this process runs with."""
    return [
        (title, [Row(name, var, chatcli, _show(getattr(settings, name))) for name, var, chatcli in rows])
        for title, rows in GROUPS
    ]
