"""Hybrid retrieval: PostgreSQL full text + vector similarity + tag overlap, fused by reciprocal rank.

``search(query, k=…, filters=…, hyde=…)`` runs each branch for its top ``LESSONS_RRF_DEPTH`` lessons
(after the filters), then scores every lesson ``Σ weight_b / (rrf_k + rank_b)`` over the branches that
found it. Each hit carries its per-branch rank and raw score, so a page can say why it was found.
With ``hyde`` the LLM first writes a hypothetical lesson for the task and the vector branch embeds
that instead of the bare query (the explanation records it).
"""

from __future__ import annotations

import itertools
import logging
import re
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from django.conf import settings
from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import connection, transaction
from django.db.models import F
from pgvector.django import CosineDistance

from lessonboard import llm
from lessons import embeddings
from lessons.content import STOP_WORDS
from lessons.metrics import RETRIEVAL_SECONDS
from lessons.models import Lesson, LessonStatus

log = logging.getLogger(__name__)

BRANCHES = ("text", "vector", "tags")
_WORD = re.compile(r"[^\W_]+(?:[-_.][^\W_]+)*")

HYDE_SYSTEM = (
    "You write the lesson an experienced engineer would have recorded after an AI coding agent failed at a "
    "task like the one given. Reply with exactly three lines and nothing else:\n"
    "LESSON: <the situation, one line>\nMISTAKE: <the likely mistake, one line>\n"
    "CORRECTION: <what to do instead, one line>"
)


@dataclass
class Filters:
    workspace: str = ""
    tags: list[str] = field(default_factory=list)
    trigger: str = ""
    agent: str = ""
    status: str = LessonStatus.ACTIVE  # "" = any status
    since: date | datetime | None = None
    until: date | datetime | None = None

    def apply(self, queryset: Any) -> Any:
        if self.workspace:
            queryset = queryset.filter(workspace__slug=self.workspace)
        if self.tags:
            queryset = queryset.filter(tags__contains=list(self.tags))
        if self.trigger:
            queryset = queryset.filter(trigger=self.trigger)
        if self.agent:
            queryset = queryset.filter(agent=self.agent)
        if self.status:
            queryset = queryset.filter(status=self.status)
        if self.since:
            queryset = queryset.filter(created_at__date__gte=self.since)
        if self.until:
            queryset = queryset.filter(created_at__date__lte=self.until)
        return queryset


@dataclass
class BranchHit:
    rank: int
    score: float


@dataclass
class Hit:
    lesson: Lesson
    score: float
    branches: dict[str, BranchHit]

    def as_dict(self) -> dict[str, Any]:
        return {
            "fused_score": round(self.score, 6),
            "branches": {name: {"rank": hit.rank, "score": round(hit.score, 6)} for name, hit in self.branches.items()},
        }


@dataclass
class SearchResult:
    hits: list[Hit]
    explanation: dict[str, Any]


@dataclass(frozen=True)
class Weights:
    text: float
    vector: float
    tags: float

    @classmethod
    def from_settings(cls) -> Weights:
        return cls(settings.LESSONS_WEIGHT_TEXT, settings.LESSONS_WEIGHT_VECTOR, settings.LESSONS_WEIGHT_TAGS)

    def of(self, branch: str) -> float:
        return float(getattr(self, branch))


def query_terms(query: str) -> list[str]:
    """Lowercased words and identifiers (``go-mod``, ``0005``, ``context_length_exceeded``) minus stop words."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        if word in STOP_WORDS or (len(word) < 2 and not word.isdigit()):
            continue
        seen.setdefault(word, None)
    return list(seen)


def _tsquery_terms(terms: list[str]) -> list[str]:
    # to_tsquery syntax: only letter/digit runs, ORed; identifiers split into their parts.
    parts: dict[str, None] = {}
    for term in terms:
        for part in re.findall(r"[^\W_]+", term):
            parts.setdefault(part, None)
    return list(parts)


# Full text at scale: an ORed query containing a word most lessons have ("file", "error") makes
# PostgreSQL rank a large part of the table. Once the table is big, words the planner statistics
# (pg_stats.most_common_elems, kept by ANALYZE) find in more than LESSONS_TEXT_COMMON_SHARE of lessons
# are left out of the query — they carry almost no ranking information anyway (BM25 would give them
# ~0 weight) — keeping at least the rarest word. Below LESSONS_TEXT_PRUNE_FROM_ROWS lessons, nothing is.
_STATS_TTL = 300.0
_stats_cache: dict[str, Any] = {"at": -_STATS_TTL, "freqs": {}, "rows": 0.0}


def reset_term_stats() -> None:
    _stats_cache.update(at=-_STATS_TTL, freqs={}, rows=0.0)


def _term_frequencies() -> tuple[dict[str, float], float]:
    now = time.monotonic()
    if now - _stats_cache["at"] > _STATS_TTL:
        with connection.cursor() as cursor:
            cursor.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass('lessons_lesson')")
            row = cursor.fetchone()
            rows = float(row[0]) if row and row[0] else 0.0
            freqs: dict[str, float] = {}
            if rows >= settings.LESSONS_TEXT_PRUNE_FROM_ROWS:
                cursor.execute(
                    "SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats "
                    "WHERE tablename = 'lessons_lesson' AND attname = 'search_vector'"
                )
                stats = cursor.fetchone()
                if stats and stats[0]:
                    freqs = dict(zip(stats[0], stats[1], strict=False))
        _stats_cache.update(at=now, freqs=freqs, rows=rows)
    return _stats_cache["freqs"], _stats_cache["rows"]


def _lexemes(words: list[str]) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [" ".join(words)])
        row = cursor.fetchone()
    return sorted(row[0] or []) if row else []


def text_terms(query: str) -> tuple[list[str], list[str]]:
    """(lexemes searched, common lexemes left out) for the full-text branch."""
    lexemes = _lexemes(_tsquery_terms(query_terms(query)))
    freqs, rows = _term_frequencies()
    if rows < settings.LESSONS_TEXT_PRUNE_FROM_ROWS or not freqs:
        return lexemes, []
    kept = [lex for lex in lexemes if freqs.get(lex, 0.0) <= settings.LESSONS_TEXT_COMMON_SHARE]
    if not kept and lexemes:
        kept = [min(lexemes, key=lambda lex: freqs.get(lex, 0.0))]
    return kept, [lex for lex in lexemes if lex not in kept]


def text_branch(query: str, base: Any, depth: int) -> list[tuple[int, float]]:
    lexemes, _ = text_terms(query)
    if not lexemes:
        return []
    # The lexemes are already stemmed: 'simple' keeps them as they are; quoting keeps to_tsquery's syntax out.
    raw = " | ".join("'" + lex.replace("'", "''") + "'" for lex in lexemes)
    tsquery = SearchQuery(raw, search_type="raw", config="simple")
    rows = (
        base.filter(search_vector=tsquery)
        .annotate(rank=SearchRank(F("search_vector"), tsquery, cover_density=True, normalization=1))
        .order_by("-rank", "-id")
        .values_list("id", "rank")[:depth]
    )
    return [(pk, float(score)) for pk, score in rows]


def vector_branch(vector: Any, base: Any, depth: int, model_id: str) -> list[tuple[int, float]]:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL hnsw.ef_search = %s", [max(settings.LESSONS_HNSW_EF_SEARCH, depth)])
            # With filters (workspace, tags…) keep walking the graph until enough rows pass them
            # (pgvector ≥ 0.8); "relaxed" order is put right by the sort below.
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        rows = (
            base.filter(embedding__isnull=False, embedding_model=model_id)
            .annotate(distance=CosineDistance("embedding", list(map(float, vector))))
            .order_by("distance")
            .values_list("id", "distance")[:depth]
        )
        found = [(pk, 1.0 - float(distance)) for pk, distance in rows]
    found.sort(key=lambda row: -row[1])
    return found


def tag_branch(query: str, base: Any, depth: int) -> list[tuple[int, float]]:
    """Lessons whose tags equal query words (or hyphen-joined word pairs), most shared tags first."""
    words = query_terms(query)
    candidates = set(words)
    plain = [w for w in words if "-" not in w]
    candidates.update(f"{a}-{b}" for a, b in itertools.pairwise(plain))
    if not candidates:
        return []
    wanted = sorted(candidates)
    rows = (
        base.filter(tags__overlap=wanted)
        .extra(
            select={"shared": "SELECT count(*) FROM unnest(lessons_lesson.tags) AS t WHERE t = ANY(%s)"},
            select_params=[wanted],
        )
        .order_by("-shared", "-score", "-id")
        .values_list("id", "shared")[:depth]
    )
    return [(pk, float(shared)) for pk, shared in rows]


def fuse(
    rankings: dict[str, list[tuple[int, float]]], weights: Weights, rrf_k: int
) -> list[tuple[int, float, dict[str, BranchHit]]]:
    """Reciprocal-rank fusion: ``Σ_b weight_b / (rrf_k + rank_b)``; ties broken by the better best rank."""
    fused: dict[int, float] = {}
    detail: dict[int, dict[str, BranchHit]] = {}
    for branch, rows in rankings.items():
        weight = weights.of(branch)
        for rank, (pk, score) in enumerate(rows, start=1):
            detail.setdefault(pk, {})[branch] = BranchHit(rank, score)
            if weight > 0:
                fused[pk] = fused.get(pk, 0.0) + weight / (rrf_k + rank)
    order = sorted(fused, key=lambda pk: (-fused[pk], min(h.rank for h in detail[pk].values()), pk))
    return [(pk, fused[pk], detail[pk]) for pk in order]


def hypothetical_lesson(task: str) -> str:
    result = llm.chat(
        [{"role": "system", "content": HYDE_SYSTEM}, {"role": "user", "content": f"TASK:\n{task}"}],
        max_tokens=300,
    )
    return result.text.strip()


def search(
    query: str,
    *,
    k: int = 5,
    filters: Filters | None = None,
    hyde: bool = False,
    weights: Weights | None = None,
    branches: tuple[str, ...] | None = None,
) -> SearchResult:
    """The top ``k`` lessons for ``query`` by reciprocal-rank fusion of the ``branches`` (see the module).
    ``branches=None`` runs every branch whose weight is above 0."""
    with RETRIEVAL_SECONDS.time():
        return _search(query, k=k, filters=filters, hyde=hyde, weights=weights, branches=branches)


def _search(
    query: str,
    *,
    k: int = 5,
    filters: Filters | None = None,
    hyde: bool = False,
    weights: Weights | None = None,
    branches: tuple[str, ...] | None = None,
) -> SearchResult:
    filters = filters or Filters()
    weights = weights or Weights.from_settings()
    if branches is None:
        branches = tuple(b for b in BRANCHES if weights.of(b) > 0)
    depth = max(settings.LESSONS_RRF_DEPTH, k)
    base = filters.apply(Lesson.objects.all())
    explanation: dict[str, Any] = {
        "query": query,
        "rrf_k": settings.LESSONS_RRF_K,
        "depth": depth,
        "weights": {b: weights.of(b) for b in BRANCHES},
        "embedding": embeddings.describe(),
        "hyde": None,
    }
    rankings: dict[str, list[tuple[int, float]]] = {}
    explanation["branches_run"] = list(branches)
    if "text" in branches:
        rankings["text"] = text_branch(query, base, depth)
        searched, common = text_terms(query)
        explanation["text_terms"] = searched
        if common:
            explanation["common_terms_left_out"] = common
    if "tags" in branches:
        rankings["tags"] = tag_branch(query, base, depth)
    provider = embeddings.provider() if "vector" in branches else None
    if provider is not None and query.strip():
        embedded_text = query
        if hyde:
            try:
                embedded_text = hypothetical_lesson(query)
                explanation["hyde"] = {"text": embedded_text}
            except llm.LLMError as exc:
                explanation["hyde"] = {"error": str(exc), "fallback": "query embedded as is"}
                embedded_text = query
        if explanation["hyde"] and "text" in explanation["hyde"]:
            vector = provider.embed_documents([embedded_text])[0]
        else:
            vector = provider.embed_query(query)
        explanation["embedded_text"] = embedded_text
        rankings["vector"] = vector_branch(vector, base, depth, provider.model_id)
    elif "vector" in branches:
        explanation["vector"] = "off: no embedding provider (lexical retrieval only)"
    fused = fuse(rankings, weights, settings.LESSONS_RRF_K)[:k]
    lessons = Lesson.objects.select_related("workspace").in_bulk([pk for pk, _, _ in fused])
    hits = [Hit(lessons[pk], score, detail) for pk, score, detail in fused if pk in lessons]
    explanation["terms"] = query_terms(query)
    return SearchResult(hits, explanation)


def similar_to(lesson: Lesson, *, k: int = 5, filters: Filters | None = None) -> SearchResult:
    """ "Find similar": the lesson's own text as the query, the lesson itself left out."""
    text = f"{lesson.situation} {lesson.correction} {' '.join(lesson.tags)}"
    result = search(text, k=k + 1, filters=filters)
    result.hits = [hit for hit in result.hits if hit.lesson.pk != lesson.pk][:k]
    return result
