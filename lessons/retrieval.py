"""Hybrid retrieval: PostgreSQL full text + vector similarity + tag overlap, fused by reciprocal rank.

``search(query, k=…, filters=…, hyde=…)`` runs each branch for its top ``LESSONS_RRF_DEPTH`` lessons
(after the filters), then scores every lesson ``Σ weight_b / (rrf_k + rank_b)`` over the branches that
found it. Each hit carries its per-branch rank and raw score, so a page can say why it was found.
With ``hyde`` the LLM first writes a hypothetical lesson for the task and the vector branch embeds
that instead of the bare query (the explanation records it).

The floor: when no lesson is closer to the task than the closest of a few dozen everyday, off-topic
sentences (``lessons/data/background.txt``, embedded by the same model) by at least
``LESSONS_FLOOR_MARGIN``, nothing applies and the answer is empty with a ``reason``
(docs/lessons.md#floor). A task is cut to ``LESSONS_QUERY_MAX_CHARS`` before anything else, and
query embeddings are kept in a small LRU cache.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import logging
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import close_old_connections, connection, transaction
from django.db.models import F
from pgvector.django import CosineDistance

from lessonboard import files, llm
from lessons import embeddings, language
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
    # Why ``hits`` is empty ("" when it is not): the floor, or nothing matched the filters.
    reason: str = ""


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
# ~0 weight) — keeping at least the rarest word when full text is all there is (no embedder); next to
# the vector branch a task of common words only skips full text (finding a frequent word's rows alone
# cost 100+ ms at 100k). Below LESSONS_TEXT_PRUNE_FROM_ROWS lessons, nothing is left out.
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


def query_configs(query: str) -> list[str]:
    """The text-search configurations a task is stemmed with: its detected language's (both English
    and Portuguese when unclear), plus ``simple`` for lessons in other languages."""
    lang = language.detect(query)
    configs = [language.ts_config(lang)] if lang else [language.ts_config(code) for code in language.LANGUAGES]
    return [*configs, "simple"]


def _lexemes(words: list[str], configs: list[str] | None = None) -> list[str]:
    configs = configs or ["english"]
    text = " ".join(words)
    parts = " || ".join("to_tsvector(%s::regconfig, %s)" for _ in configs)
    params: list[str] = []
    for config in configs:
        params += [config, text]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tsvector_to_array({parts})", params)
        row = cursor.fetchone()
    return sorted(row[0] or []) if row else []


def text_terms(query: str, *, keep_rarest: bool = True) -> tuple[list[str], list[str]]:
    """(lexemes searched, common lexemes left out) for the full-text branch."""
    lexemes = _lexemes(_tsquery_terms(query_terms(query)), query_configs(query))
    freqs, rows = _term_frequencies()
    if rows < settings.LESSONS_TEXT_PRUNE_FROM_ROWS or not freqs:
        return lexemes, []
    kept = [lex for lex in lexemes if freqs.get(lex, 0.0) <= settings.LESSONS_TEXT_COMMON_SHARE]
    if not kept and lexemes and keep_rarest:
        kept = [min(lexemes, key=lambda lex: freqs.get(lex, 0.0))]
    return kept, [lex for lex in lexemes if lex not in kept]


def text_branch(query: str, base: Any, depth: int, lexemes: list[str] | None = None) -> list[tuple[int, float]]:
    """Lessons matching any of the task's lexemes, by cover density. At most ``LESSONS_TEXT_CANDIDATES``
    matching rows are ranked (the GIN index finds them; ranking is what costs), which bounds the branch
    at any table size; the common-word pruning above keeps the matching set small in the first place."""
    if lexemes is None:
        lexemes, _ = text_terms(query)
    if not lexemes:
        return []
    # The lexemes are already stemmed: 'simple' keeps them as they are; quoting keeps to_tsquery's syntax out.
    raw = " | ".join("'" + lex.replace("'", "''") + "'" for lex in lexemes)
    tsquery = SearchQuery(raw, search_type="raw", config="simple")
    # One pass: the bounded candidate scan ranks each row it reads, and PostgreSQL keeps the top ``depth``.
    # order_by(): with the model's default order (newest first) PostgreSQL found and sorted every matching
    # row before taking the bound (90 ms for a word in 60% of 100k lessons); unordered, the scan stops at
    # it. Ranking inside the scan saves joining the candidates back to the table (a second heap visit).
    candidates = (
        base.filter(search_vector=tsquery)
        .order_by()
        .annotate(rank=SearchRank(F("search_vector"), tsquery, cover_density=True, normalization=1))
        .values_list("id", "rank")[: settings.LESSONS_TEXT_CANDIDATES]
    )
    sql, params = candidates.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.id, c.rank FROM ({sql}) AS c ORDER BY c.rank DESC, c.id DESC LIMIT %s",  # noqa: S608
            [*params, depth],
        )
        rows = cursor.fetchall()
    return [(pk, float(score)) for pk, score in rows]


class QueryVectors:
    """An LRU cache of query embeddings by (model, text): agents repeat tasks, and the embedding is
    the largest part of a retrieval's time (docs/lessons.md#latency)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, provider: embeddings.Provider, text: str) -> tuple[Any, bool]:
        key = (provider.model_id, text)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key], True
        vector = provider.embed_query(text)
        with self._lock:
            self.misses += 1
            if self.size > 0:
                self._items[key] = vector
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        return vector, False

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0


_query_vectors: QueryVectors | None = None
_embedder_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="query-embed")


def _embed_query(provider: embeddings.Provider, query: str) -> tuple[Any, bool]:
    """``query_vectors().get`` in a pool thread. An embeddings endpoint reached through the LLM gateway
    reads and writes the breaker's row from this thread, on a connection of its own that no request
    signal ever looks after: do what Django does around a request, so a connection the database dropped
    (a restart, a failover) is replaced instead of failing every later call, and an old one is closed."""
    close_old_connections()
    try:
        return query_vectors().get(provider, query)
    finally:
        close_old_connections()


def query_vectors() -> QueryVectors:
    global _query_vectors
    if _query_vectors is None or _query_vectors.size != settings.LESSONS_QUERY_CACHE_SIZE:
        _query_vectors = QueryVectors(settings.LESSONS_QUERY_CACHE_SIZE)
    return _query_vectors


# --- the floor ------------------------------------------------------------------------------------------
BACKGROUND = Path(__file__).resolve().parent / "data" / "background.txt"
_background: dict[str, Any] = {}
_background_lock = threading.Lock()


def background_sentences() -> list[str]:
    lines = BACKGROUND.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def background_vectors(provider: embeddings.Provider) -> Any:
    """The background sentences embedded by ``provider``: once per model and process, and kept in the
    data dir's cache (keyed by model and sentences) so a new worker process does not pay the seconds
    embedding ~100 sentences takes on its first retrieve."""
    with _background_lock:
        if provider.model_id not in _background:
            sentences = background_sentences()
            key = hashlib.sha256("\n".join([provider.model_id, *sentences]).encode()).hexdigest()[:16]
            path = settings.DATA_DIR / "retrieval" / f"background-{key}.npy"
            try:
                vectors = np.load(path, allow_pickle=False)
            except (OSError, ValueError):
                vectors = np.asarray(provider.embed_documents(sentences), dtype=np.float32)
                buffer = io.BytesIO()
                np.save(buffer, vectors, allow_pickle=False)
                try:
                    files.write_atomic(path, buffer.getvalue(), mode=0o644)
                except OSError:
                    log.warning("retrieval: cannot cache the floor's background vectors at %s", path)
            _background[provider.model_id] = vectors
        return _background[provider.model_id]


def floor_check(vector: Any, best: float, provider: embeddings.Provider) -> dict[str, Any]:
    """How the best lesson's similarity compares with the closest off-topic sentence's."""
    background = float(np.max(background_vectors(provider) @ np.asarray(vector, dtype=np.float32)))
    margin = settings.LESSONS_FLOOR_MARGIN
    return {
        "best_similarity": round(best, 4),
        "background_similarity": round(background, 4),
        "margin": margin,
        "passed": best - background >= margin,
    }


def vector_branch(vector: Any, base: Any, depth: int, model_id: str) -> list[tuple[int, float]]:
    with transaction.atomic():
        with connection.cursor() as cursor:
            # One round trip for both settings. With filters (workspace, tags…) keep walking the graph
            # until enough rows pass them (pgvector ≥ 0.8); "relaxed" order is put right by the sort below.
            cursor.execute(
                "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                [str(max(settings.LESSONS_HNSW_EF_SEARCH, depth))],
            )
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


def hypothetical_lesson(task: str, *, workspace: str = "") -> str:
    from lessonboard.llm import usage

    with usage.context(purpose="hyde", workspace=workspace, prompt="hyde", version="hyde-v1"):
        result = llm.chat(
            [{"role": "system", "content": HYDE_SYSTEM}, {"role": "user", "content": f"TASK:\n{task}"}],
            max_tokens=300,
        )
    return parse_hyde(result.text)


_HYDE_LINE = re.compile(r"^\W*(LESSON|SITUATION|MISTAKE|CORRECTION)\W*:\s*(.+?)\s*$", re.I | re.M)


def parse_hyde(text: str) -> str:
    """The hypothetical lesson to embed, as models write it: ``<think>`` dropped, a fence opened, and the
    LESSON/MISTAKE/CORRECTION lines kept without what surrounds them (any text when there are none). A
    refusal or an empty answer raises ``PermanentLLMError`` (the search then embeds the query as is)."""
    from lessonboard.llm import replies

    refused = replies.refusal(text)
    if refused:
        raise llm.PermanentLLMError(f"HyDE: the model refused: {refused}")
    body, _ = replies.strip_think(text)
    fences = replies.fenced_blocks(body)
    if fences and not _HYDE_LINE.search(body.split("```", 1)[0]):
        body = fences[0][1]
    lines = [f"{m.group(1).upper()}: {m.group(2).strip('*_ ')}" for m in _HYDE_LINE.finditer(body)]
    answer = "\n".join(lines) if lines else body.strip()
    if not answer:
        raise llm.PermanentLLMError("HyDE: the reply has no text after its reasoning")
    return answer


def search(
    query: str,
    *,
    k: int = 5,
    filters: Filters | None = None,
    hyde: bool = False,
    weights: Weights | None = None,
    branches: tuple[str, ...] | None = None,
    floor: bool = True,
) -> SearchResult:
    """The top ``k`` lessons for ``query`` by reciprocal-rank fusion of the ``branches`` (see the module).
    ``branches=None`` runs every branch whose weight is above 0. ``floor=False`` (the pages: a person
    browsing) still reports the floor's verdict in the explanation but keeps the hits."""
    with RETRIEVAL_SECONDS.time():
        return _search(query, k=k, filters=filters, hyde=hyde, weights=weights, branches=branches, floor=floor)


def _search(
    query: str,
    *,
    k: int = 5,
    filters: Filters | None = None,
    hyde: bool = False,
    weights: Weights | None = None,
    branches: tuple[str, ...] | None = None,
    floor: bool = True,
) -> SearchResult:
    filters = filters or Filters()
    weights = weights or Weights.from_settings()
    full_length = len(query)
    query = query[: settings.LESSONS_QUERY_MAX_CHARS]
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
    if full_length > len(query):
        explanation["truncated"] = {"from_chars": full_length, "to_chars": len(query)}
    provider = embeddings.provider() if "vector" in branches else None
    # The query embedding (the largest part of a retrieval) runs in a thread while the full-text
    # branch queries PostgreSQL: both release the GIL (the model in C, the driver on the socket).
    pending = None
    if provider is not None and query.strip() and not hyde:
        pending = _embedder_pool.submit(_embed_query, provider, query)
    if "text" in branches:
        searched, common = text_terms(query, keep_rarest=provider is None)
        rankings["text"] = text_branch(query, base, depth, lexemes=searched)
        explanation["text_terms"] = searched
        if common:
            explanation["common_terms_left_out"] = common
    if "tags" in branches:
        rankings["tags"] = tag_branch(query, base, depth)
    if provider is not None and query.strip():
        embedded_text = query
        if hyde:
            try:
                embedded_text = hypothetical_lesson(query)
                explanation["hyde"] = {"text": embedded_text}
            except llm.LLMError as exc:
                explanation["hyde"] = {"error": str(exc), "fallback": "query embedded as is"}
                embedded_text = query
        vector = None
        try:
            if explanation["hyde"] and "text" in explanation["hyde"]:
                vector = provider.embed_documents([embedded_text])[0]
            else:
                vector, cached = pending.result() if pending is not None else query_vectors().get(provider, query)
                explanation["query_vector_cached"] = cached
        except llm.LLMError as exc:
            # The embeddings endpoint is down (or the LLM breaker is open, docs/operations.md#llm-outage):
            # the search answers from the text and tag branches instead of failing.
            explanation["vector"] = f"off: {exc.message}"
        if vector is not None:
            explanation["embedded_text"] = embedded_text
            rankings["vector"] = vector_branch(vector, base, depth, provider.model_id)
            if rankings["vector"]:
                explanation["floor"] = floor_check(vector, rankings["vector"][0][1], provider)
    elif "vector" in branches:
        explanation["vector"] = "off: no embedding provider (lexical retrieval only)"
        explanation["floor"] = "off: the floor needs embeddings"
    explanation["terms"] = query_terms(query)
    verdict = explanation.get("floor")
    if isinstance(verdict, dict) and not verdict["passed"]:
        verdict["reason"] = (
            "no lesson applies: the closest lesson (similarity {best_similarity}) is not closer to the task than "
            "everyday off-topic text ({background_similarity}) by the margin {margin}".format(**verdict)
        )
        if floor:
            return SearchResult([], explanation, verdict["reason"])
    fused = fuse(rankings, weights, settings.LESSONS_RRF_K)[:k]
    lessons = Lesson.objects.select_related("workspace").in_bulk([pk for pk, _, _ in fused])
    hits = [Hit(lessons[pk], score, detail) for pk, score, detail in fused if pk in lessons]
    reason = "" if hits else "no lesson matches the task and the filters"
    return SearchResult(hits, explanation, reason)


def similar_to(lesson: Lesson, *, k: int = 5, filters: Filters | None = None) -> SearchResult:
    """ "Find similar": the lesson's own text as the query, the lesson itself left out."""
    text = f"{lesson.situation} {lesson.correction} {' '.join(lesson.tags)}"
    result = search(text, k=k + 1, filters=filters, floor=False)
    result.hits = [hit for hit in result.hits if hit.lesson.pk != lesson.pk][:k]
    return result
