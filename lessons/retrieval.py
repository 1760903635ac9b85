"""Hybrid retrieval: PostgreSQL full text + vector similarity + tag overlap, fused by reciprocal rank.

``search(query, k=…, filters=…, hyde=…)`` runs each branch for its top ``RETRIEVAL_DEPTH`` lessons
(after the filters), then scores every lesson ``Σ weight_b / (rrf_k + rank_b)`` over the branches that
found it. Each hit carries its per-branch rank and raw score, so a page can say why it was found.
With ``hyde`` the LLM first writes a hypothetical lesson for the task and the vector branch embeds
that instead of the bare query (the explanation records it).

The floor: when no lesson is closer to the task than the closest of a few dozen everyday, off-topic
sentences (``lessons/data/background.txt``, embedded by the same model) by at least
``RETRIEVAL_FLOOR_MARGIN`` (``RETRIEVAL_FLOOR_MARGIN_AGREE`` when the branches agree: the best vector hit
is among the first 5 full-text hits), nothing applies and the answer is empty with a ``reason``
(docs/lessons.md#floor). A task is cut to ``RETRIEVAL_QUERY_MAX_CHARS`` before anything else, and
query embeddings are kept in a small LRU cache.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from types import EllipsisType
from typing import Any

import numpy as np
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import Q, Subquery, Value
from pgvector.django import CosineDistance

from lessonboard import files, llm
from lessonboard.llm import promptfiles
from lessonboard.models import Workspace
from lessons import embeddings, language, software
from lessons.content import STOP_WORDS
from lessons.metrics import RETRIEVAL_SECONDS
from lessons.models import Lesson, LessonScope, LessonStatus

log = logging.getLogger(__name__)

BRANCHES = ("text", "vector", "tags")
_WORD = re.compile(r"[^\W_]+(?:[-_.][^\W_]+)*")

HYDE_PROMPT = promptfiles.load(Path(__file__).resolve().parent / "prompts", "hyde-v1")
HYDE_SYSTEM = HYDE_PROMPT.text


# ``Filters.scope`` (docs/lessons.md#scopes): "all" = the workspace's own lessons and the shared tier (what an
# agent's retrieve searches), "workspace" = its own workspace-tier lessons only, "shared" = the shared tier
# only, "" = the named workspace's lessons of either tier and no shared lesson of another (the pages).
SCOPES = ("all", "workspace", "shared")


@dataclass
class Filters:
    workspace: str = ""
    tags: list[str] = field(default_factory=list)
    trigger: str = ""
    agent: str = ""
    status: str = LessonStatus.ACTIVE  # "" = any status but deleted; "deleted" = the tombstones
    since: date | datetime | None = None
    until: date | datetime | None = None
    scope: str = ""

    def apply(self, queryset: Any) -> Any:
        # The workspace's id as a parameter (not a join): the full-text GIN index leads with it.
        own = Q(workspace_id=Subquery(Workspace.objects.filter(slug=self.workspace).values("id")[:1]))
        shared = Q(scope=LessonScope.SHARED)
        if self.scope == "shared":
            queryset = queryset.filter(shared)
        elif self.scope == "workspace":
            queryset = queryset.filter(own & ~shared) if self.workspace else queryset.exclude(shared)
        elif self.workspace:
            queryset = queryset.filter(own | shared) if self.scope == "all" else queryset.filter(own)
        if self.tags:
            queryset = queryset.filter(tags__contains=list(self.tags))
        if self.trigger:
            queryset = queryset.filter(trigger=self.trigger)
        if self.agent:
            queryset = queryset.filter(agent=self.agent)
        if self.status:
            queryset = queryset.filter(status=self.status)
        else:
            queryset = queryset.exclude(status=LessonStatus.DELETED)
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
        return cls(settings.RETRIEVAL_WEIGHT_TEXT, settings.RETRIEVAL_WEIGHT_VECTOR, settings.RETRIEVAL_WEIGHT_TAGS)

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


# --- the full-text branch ---------------------------------------------------------------------------
# It searches ``term_vector`` (migration 0010): a lesson's words stemmed by its language, the same words
# unstemmed ('simple'), and every code-like token (``go.sum``, ``ERR_OSSL_EVP_UNSUPPORTED``,
# ``--max-old-space-size``, ``E0382``, ``import.meta.env.VITE_API_URL``) whole, by segment and in parts,
# extracted by the SQL function ``lesson_code_terms`` that the task goes through too. A task becomes
# *terms*: each plain word (its stems and itself) and each code-like token or part. A lesson's score is the
# sum of the inverse document frequencies (BM25's idf, from the planner statistics of ``term_vector``) of
# the terms it has, plus a small share of ``ts_rank`` (how often and how densely): a rare exact identifier
# outweighs any number of everyday words.
#
# Cost (docs/api.md#limits): at most ``RETRIEVAL_MAX_TERMS`` terms are ORed — the rarest by the
# statistics, the rest dropped and listed in the explanation (``text_terms_over_cap``) — and on a big table
# (``RETRIEVAL_PRUNE_FROM_ROWS``) terms in more than ``RETRIEVAL_COMMON_SHARE`` of lessons are left
# out (``common_terms_left_out``; next to the vector branch a task of common words only skips full text).
# At most ``RETRIEVAL_TEXT_CANDIDATES`` matching rows are scored; the GIN index leads with the workspace, so a
# workspace's search is bounded inside the index scan.
_STATS_TTL = 300.0
_stats_cache: dict[str, Any] = {"at": -_STATS_TTL, "freqs": {}, "rows": 0.0, "tags": {}}
_PLAIN = re.compile(r"[^\W_]+")
_EXACT = re.compile(r"[0-9_.:/=@+-]")


def _is_identifier(label: str) -> bool:
    """A code-like term (a digit or ``_ . : / = @ + -`` inside). A bare number needs three digits or more:
    ``413``, ``8080`` and ``1213`` are codes and ports, ``5`` in "a 5-day trip" is not."""
    if label.isdigit():
        return len(label) >= 3
    return bool(_EXACT.search(label))


_CAMEL = re.compile(r"[A-Za-z0-9]*[a-z][A-Z][A-Za-z0-9]*")


@dataclass(frozen=True)
class TextTerm:
    label: str  # the task's own form
    lexemes: tuple[str, ...]  # any of these in ``term_vector`` counts
    share: float  # of lessons having it (planner statistics; the floor of the known shares when unknown)
    idf: float
    exact: bool = False  # a code-like token (digits, punctuation or camelCase): an identifier, not a word


# A workspace's search is pruned by that workspace's own statistics (its newest WORKSPACE_TERM_SAMPLE
# lessons, through ts_stat), so ``common_terms_left_out`` never tells one tenant what is common in another's.
WORKSPACE_TERM_SAMPLE = 5000
_workspace_stats: dict[str, dict[str, Any]] = {}


def reset_term_stats() -> None:
    _stats_cache.update(at=-_STATS_TTL, freqs={}, rows=0.0, tags={})
    _workspace_stats.clear()


def _workspace_term_frequencies(workspace: str) -> tuple[dict[str, float], float]:
    now = time.monotonic()
    entry = _workspace_stats.get(workspace)
    if entry is None or now - entry["at"] > _STATS_TTL:
        freqs: dict[str, float] = {}
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT w.id, count(l.id) FROM lessonboard_workspace w LEFT JOIN lessons_lesson l "
                "ON l.workspace_id = w.id WHERE w.slug = %s GROUP BY w.id",
                [workspace],
            )
            row = cursor.fetchone()
            ws_id, rows = (int(row[0]), float(row[1])) if row else (None, 0.0)
            if ws_id is not None and rows >= settings.RETRIEVAL_PRUNE_FROM_ROWS:
                sample = min(rows, float(WORKSPACE_TERM_SAMPLE))
                inner = (
                    "SELECT search_vector FROM lessons_lesson WHERE workspace_id = "  # noqa: S608 - an int
                    f"{ws_id:d} ORDER BY id DESC LIMIT {WORKSPACE_TERM_SAMPLE:d}"
                )
                cursor.execute(
                    "SELECT word, ndoc FROM ts_stat(%s) WHERE ndoc > %s",
                    [inner, sample * settings.RETRIEVAL_COMMON_SHARE],
                )
                freqs = {word: ndoc / sample for word, ndoc in cursor.fetchall()}
        if len(_workspace_stats) > 1000:
            _workspace_stats.clear()
        entry = _workspace_stats[workspace] = {"at": now, "freqs": freqs, "rows": rows}
    return entry["freqs"], entry["rows"]


def _term_frequencies() -> tuple[dict[str, float], float]:
    """(lexeme → share of lessons, rows) from ``pg_stats`` of ``term_vector`` (kept by ANALYZE)."""
    now = time.monotonic()
    if now - _stats_cache["at"] > _STATS_TTL:
        with connection.cursor() as cursor:
            cursor.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass('lessons_lesson')")
            row = cursor.fetchone()
            rows = float(row[0]) if row and row[0] and row[0] > 0 else 0.0
            if rows <= 0:  # never analysed (a new table): count, up to a bound
                cursor.execute("SELECT count(*) FROM (SELECT 1 FROM lessons_lesson LIMIT 100000) AS s")
                rows = float(cursor.fetchone()[0])
            cursor.execute(
                "SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats "
                "WHERE tablename = 'lessons_lesson' AND attname = 'term_vector'"
            )
            stats = cursor.fetchone()
            freqs: dict[str, float] = dict(zip(stats[0], stats[1], strict=False)) if stats and stats[0] else {}
            cursor.execute(
                "SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats "
                "WHERE tablename = 'lessons_lesson' AND attname = 'tags'"
            )
            stats = cursor.fetchone()
            tags: dict[str, float] = dict(zip(stats[0], stats[1], strict=False)) if stats and stats[0] else {}
        _stats_cache.update(at=now, freqs=freqs, rows=rows, tags=tags)
    return _stats_cache["freqs"], _stats_cache["rows"]


def query_configs(query: str) -> list[str]:
    """The text-search configurations a task is stemmed with: its detected language's (both English
    and Portuguese when unclear), plus ``simple`` for lessons in other languages."""
    lang = language.detect(query)
    configs = [language.ts_config(lang)] if lang else [language.ts_config(code) for code in language.LANGUAGES]
    return [*configs, "simple"]


# PostgreSQL's longest lexeme, in bytes: to_tsvector leaves a longer word out of every lesson's term_vector,
# and a tsquery with one is refused (error 54000) — so a task's longer word can match nothing and is dropped.
MAX_LEXEME_BYTES = 2046


def _fits(lexeme: str) -> bool:
    return len(lexeme.encode()) <= MAX_LEXEME_BYTES


def _analyse(query: str) -> tuple[list[tuple[str, tuple[str, ...]]], list[str]]:
    """(plain word → its lexemes, code-like lexemes) of a task, in one round trip; a word too long for
    PostgreSQL's full text (``MAX_LEXEME_BYTES``) is left out, as it is of every lesson's."""
    words = [w for w in query_terms(query) if _PLAIN.fullmatch(w) and _fits(w)]
    configs = query_configs(query)
    stems = " || ".join("to_tsvector(%s::regconfig, w)" for _ in configs)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT json_agg(json_build_array(w, tsvector_to_array({stems})) ORDER BY n) "  # noqa: S608
            "FROM unnest(%s::text[]) WITH ORDINALITY AS u(w, n)), lesson_code_terms(%s)",
            [*configs, words, query],
        )
        row = cursor.fetchone()
    stemmed, code = (row[0] or [], row[1] or []) if row else ([], [])
    plain = [(w, tuple(sorted({w, *(lex or [])}))) for w, lex in stemmed]
    return plain, [lex for lex in code if _fits(lex)]


def analyse_terms(
    query: str, *, keep_rarest: bool = True, workspace: str = ""
) -> tuple[list[TextTerm], dict[str, list[str]]]:
    """The task's full-text terms, rarest first, and those left out: ``{"common": [...], "over_cap": [...]}``.
    The idf comes from the whole table's statistics; in a workspace, which terms are too common to search
    comes from that workspace's own (so ``common_terms_left_out`` never tells one tenant about another's)."""
    plain, code = _analyse(query)
    freqs, rows = _term_frequencies()
    unknown = min(freqs.values()) / 2 if freqs else 0.0
    n_rows = max(rows, 1.0)
    groups: dict[str, tuple[str, ...]] = {}
    for word, lexemes in plain:
        groups.setdefault(word, lexemes)
    known = {lex for lexemes in groups.values() for lex in lexemes}
    for lex in code:
        if lex not in known:
            groups.setdefault(lex, (lex,))
    camel = {token.lower() for token in _CAMEL.findall(query)}
    terms = []
    for label, lexemes in groups.items():
        share = max(freqs.get(lex, unknown) for lex in lexemes)
        df = share * n_rows
        idf = math.log(1.0 + (n_rows - df + 0.5) / (df + 0.5))
        terms.append(TextTerm(label, lexemes, share, idf, _is_identifier(label) or label in camel))
    terms.sort(key=lambda t: (t.share, -len(t.label), t.label))
    left_out: dict[str, list[str]] = {"common": [], "over_cap": []}
    if workspace:
        prune_freqs, prune_rows = _workspace_term_frequencies(workspace)
    else:
        prune_freqs, prune_rows = freqs, rows

    def share_of(term: TextTerm) -> float:
        return term.share if not workspace else max(prune_freqs.get(lex, 0.0) for lex in term.lexemes)

    if prune_rows >= settings.RETRIEVAL_PRUNE_FROM_ROWS and prune_freqs:
        kept = [t for t in terms if share_of(t) <= settings.RETRIEVAL_COMMON_SHARE]
        if not kept and terms and keep_rarest:
            kept = terms[:1]
        left_out["common"] = [t.label for t in terms if t not in kept]
        terms = kept
    cap = settings.RETRIEVAL_MAX_TERMS
    left_out["over_cap"] = [t.label for t in terms[cap:]]
    return terms[:cap], left_out


def text_terms(query: str, *, keep_rarest: bool = True, workspace: str = "") -> tuple[list[str], list[str]]:
    """(lexemes searched, the task's words left out as too common) for the full-text branch; in a workspace,
    what counts as common comes from that workspace's own statistics."""
    terms, left_out = analyse_terms(query, keep_rarest=keep_rarest, workspace=workspace)
    searched = sorted({lex for t in terms for lex in t.lexemes})
    return searched, sorted(left_out["common"])


def _tsquery(lexemes: Iterable[str]) -> str:
    # tsquery's own input syntax: quoted lexemes are taken as they are (no parser, no stemming).
    return " | ".join("'" + lex.replace("'", "''") + "'" for lex in lexemes)


def text_branch(
    query: str, base: Any, depth: int, lexemes: list[str] | None = None, terms: list[TextTerm] | None = None
) -> list[tuple[int, float]]:
    """``text_branch_detail`` without the exact-term share: (lesson id, score), best first."""
    return [(pk, score) for pk, score, _ in text_branch_detail(query, base, depth, lexemes, terms)]


def text_branch_detail(
    query: str, base: Any, depth: int, lexemes: list[str] | None = None, terms: list[TextTerm] | None = None
) -> list[tuple[int, float, float]]:
    """Lessons having any of the task's terms, by the idf of the terms they have (see above). At most
    ``RETRIEVAL_TEXT_CANDIDATES`` matching rows are scored, which bounds the branch at any table size."""
    if terms is None:
        terms, _ = analyse_terms(query)
    if lexemes is not None:
        wanted = set(lexemes)
        terms = [t for t in terms if wanted & set(t.lexemes)]
    if not terms:
        return []
    every = _tsquery(lex for t in terms for lex in t.lexemes)
    # Which of the terms each candidate has (one match per term and row), scored here: the idf sum, the
    # identifiers' share of it, and a tenth of ts_rank (how often and how densely) as the tie-breaker.
    matches = "ARRAY[" + ", ".join("lessons_lesson.term_vector @@ %s::tsquery" for _ in terms) + "]"
    bound = settings.RETRIEVAL_TEXT_CANDIDATES
    rows: list[tuple[int, list[bool], float]] = []
    # The rarest terms' lessons are read first, then the rest up to the bound: unordered, one word that many
    # lessons have (none is left out as common below RETRIEVAL_PRUNE_FROM_ROWS) could fill the bound in
    # scan order and leave out the one lesson with the task's error code.
    for group in _rare_first(terms, bound):
        if len(rows) >= bound:
            break
        group_query = _tsquery(lex for t in group for lex in t.lexemes)
        # order_by(): unordered, the bounded scan stops at the bound instead of sorting every match first.
        candidates = base.extra(  # noqa: S610 - every value is a parameter
            select={"tmatch": matches, "trank": "ts_rank(lessons_lesson.term_vector, %s::tsquery, 1)"},
            select_params=[*(_tsquery(t.lexemes) for t in terms), every],
            where=["lessons_lesson.term_vector @@ %s::tsquery"],
            params=[group_query],
        ).order_by()
        if rows:
            candidates = candidates.exclude(pk__in=[row[0] for row in rows])
        sql, params = candidates.values_list("id", "tmatch", "trank")[: bound - len(rows)].query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows += cursor.fetchall()
    idf = [t.idf for t in terms]
    exact = [t.idf if t.exact else 0.0 for t in terms]
    scored = []
    for pk, has, rank in rows:
        score = sum(w for w, hit in zip(idf, has, strict=True) if hit) + 0.1 * float(rank)
        scored.append((pk, score, sum(w for w, hit in zip(exact, has, strict=True) if hit)))
    scored.sort(key=lambda row: (-row[1], -row[0]))
    return scored[:depth]


def _rare_first(terms: list[TextTerm], bound: int) -> list[list[TextTerm]]:
    """The terms in one group, or two when the bound can bind: the rarest (by the statistics' estimate of
    how many lessons have them, up to half the bound together; the rarest always) and the rest."""
    _, rows = _term_frequencies()
    ordered = sorted(terms, key=lambda t: t.share)
    rare: list[TextTerm] = []
    estimate = 0.0
    for term in ordered:
        if rare and estimate + term.share * rows > bound / 2:
            break
        rare.append(term)
        estimate += term.share * rows
    rest = ordered[len(rare) :]
    return [rare, rest] if rest else [rare]


def rare_exact(text_rows: list[tuple[int, float, float]], min_idf: float) -> bool:
    """Whether the best full-text hit has the task's exact identifiers worth ``min_idf`` (summed idf)."""
    return bool(text_rows) and text_rows[0][2] >= min_idf


def floor_features(
    vector_rows: list[tuple[int, float]],
    text_rows: list[tuple[int, float, float]],
    terms: list[TextTerm],
    floor: dict[str, Any] | None,
) -> dict[str, float]:
    """What the floor decides on: ``gap`` (best lesson's cosine − the closest everyday sentence's),
    ``cover`` (the share of the task's idf mass the best full-text hit has), ``exact`` (the idf of the
    task's identifiers it has), ``agree`` (1 when the best vector hit is among the first 5 full-text
    hits) and ``margin`` (the cosine between the first two vector hits)."""
    mass = sum(t.idf for t in terms) or 1.0
    top_text = [pk for pk, _, _ in text_rows[:5]]
    return {
        "gap": (floor["best_similarity"] - floor["background_similarity"]) if floor else -1.0,
        "cover": min(text_rows[0][1] / mass, 1.0) if text_rows else 0.0,
        "exact": text_rows[0][2] if text_rows else 0.0,
        "agree": 1.0 if vector_rows and vector_rows[0][0] in top_text else 0.0,
        "margin": vector_rows[0][1] - vector_rows[1][1] if len(vector_rows) > 1 else 0.0,
    }


class QueryVectors:
    """An LRU cache of query embeddings by (model, scope, text): agents repeat tasks, and the embedding is
    the largest part of a retrieval's time (docs/lessons.md#latency). ``scope`` is the workspace searched,
    so ``query_vector_cached`` never tells one tenant what another asked recently."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, provider: embeddings.Provider, text: str, scope: str = "") -> tuple[Any, bool]:
        key = (provider.model_id, scope, text)
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


def _embed_query(provider: embeddings.Provider, query: str, scope: str = "") -> tuple[Any, bool]:
    """``query_vectors().get`` in a pool thread. An embeddings endpoint reached through the LLM gateway
    reads and writes the breaker's row from this thread, on a connection of its own that no request
    signal ever looks after: do what Django does around a request, so a connection the database dropped
    (a restart, a failover) is replaced instead of failing every later call, and an old one is closed."""
    close_old_connections()
    try:
        return query_vectors().get(provider, query, scope)
    finally:
        close_old_connections()


def query_vectors() -> QueryVectors:
    global _query_vectors
    if _query_vectors is None or _query_vectors.size != settings.RETRIEVAL_QUERY_CACHE:
        _query_vectors = QueryVectors(settings.RETRIEVAL_QUERY_CACHE)
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


def floor_passes(vectors: Any, similarities: Any, provider: embeddings.Provider) -> Any:
    """The floor's decision for many tasks at once (``floor_check``'s rule, one matrix product): for each
    task vector (a row) whether a lesson at that cosine similarity to it clears the closest everyday
    off-topic sentence by ``RETRIEVAL_FLOOR_MARGIN``, slid by its software-work score (``software_slide``)
    — i.e. whether retrieval would serve it. The impact preview and the knowledge gaps decide with this,
    never with a threshold of their own. A task the software-work classifier vetoes never passes, as in
    ``floor_check``."""
    matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    background = np.max(matrix @ background_vectors(provider).T, axis=1)
    scores = software_scores(matrix, provider)
    gap = np.asarray(similarities, dtype=np.float32) - background + software_slide(scores)
    passes = gap >= settings.RETRIEVAL_FLOOR_MARGIN
    if scores is None:
        return passes
    return passes & ~(scores < settings.RETRIEVAL_FLOOR_SOFTWARE_MIN)


def software_slide(scores: Any) -> Any:
    """How far the floor's margins move for a task's software-work score (or scores):
    ``RETRIEVAL_FLOOR_SOFTWARE_SLIDE`` × the score clipped to −5…5, added to the task's gap — a task that
    plainly is software work is served a little further from the lessons, one that barely is must come a
    little closer (docs/lessons.md#floor). 0 without a classifier."""
    if scores is None or not settings.RETRIEVAL_FLOOR_SOFTWARE_SLIDE:
        return 0.0
    return settings.RETRIEVAL_FLOOR_SOFTWARE_SLIDE * np.clip(scores, -5.0, 5.0)


def background_similarity(vectors: Any, provider: embeddings.Provider) -> Any:
    """Each task vector's cosine to the closest everyday off-topic sentence (the floor's yardstick)."""
    matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    return np.max(matrix @ background_vectors(provider).T, axis=1)


def floor_check(
    vector: Any, best: float, provider: embeddings.Provider, *, agree: bool = False, identifiers: bool = False
) -> dict[str, Any]:
    """How the best lesson's similarity compares with the closest off-topic sentence's. With ``agree``
    (the branches agree on the best lesson: ``branches_agree``) the margin is the smaller of
    ``RETRIEVAL_FLOOR_MARGIN`` and ``RETRIEVAL_FLOOR_MARGIN_AGREE``; with ``agree`` and ``identifiers`` (the
    best full-text hit has the task's rare identifiers, ``rare_exact``) it passes whatever the cosines: an
    error code or flag of the task, in the lesson both branches put first, is a witness no everyday
    sentence has."""
    background = float(np.max(background_vectors(provider) @ np.asarray(vector, dtype=np.float32)))
    margin = settings.RETRIEVAL_FLOOR_MARGIN
    if agree:
        margin = min(margin, settings.RETRIEVAL_FLOOR_MARGIN_AGREE)
    # The second witness: whether the task is about software work at all (lessons/software.py). Its score
    # slides the margin (``software_slide``), and its veto below stands over every pass: both were chosen
    # with the margins (docs/lessons.md#floor).
    work = software_score(vector, provider)
    slide = float(software_slide(work))
    verdict = {
        "best_similarity": round(best, 4),
        "background_similarity": round(background, 4),
        "margin": round(margin - slide, 4),  # the margin this task had to clear
        "branches_agree": agree,
        "passed": best - background + slide >= margin,
    }
    if slide:
        verdict["software_slide"] = round(slide, 4)
    if agree and identifiers:
        verdict["rare_identifiers_agree"] = True
        verdict["passed"] = True
    if work is not None:
        verdict["software_score"] = round(work, 3)
        if work < settings.RETRIEVAL_FLOOR_SOFTWARE_MIN and verdict["passed"]:
            verdict["not_software_work"] = True  # what decided it
            verdict["passed"] = False
    return verdict


def software_scores(vectors: Any, provider: embeddings.Provider) -> Any:
    """Each task vector's software-work logit (lessons/software.py), or None: no classifier for this model,
    or the floor is off (a margin of -1)."""
    if settings.RETRIEVAL_FLOOR_MARGIN <= -1.0:
        return None
    return software.scores(vectors, provider.model_id)


def software_score(vector: Any, provider: embeddings.Provider) -> float | None:
    found = software_scores(vector, provider)
    return None if found is None else float(found[0])


def not_software_work(vectors: Any, provider: embeddings.Provider) -> Any:
    """For each task vector (a row), whether the classifier vetoes it: a retrieve answers it with no lesson,
    whatever is near. All False without a classifier or with the floor off."""
    scores = software_scores(vectors, provider)
    if scores is None:
        return np.zeros(len(np.atleast_2d(vectors)), dtype=bool)
    return scores < settings.RETRIEVAL_FLOOR_SOFTWARE_MIN


def branches_agree(vector_rows: list[tuple[int, float]], text_rows: list[tuple[int, float]]) -> bool:
    """Whether the best vector hit is among the first 5 full-text hits (a second, lexical, witness that
    the task is about that lesson; ``floor_features``' ``agree``)."""
    return bool(vector_rows) and vector_rows[0][0] in {pk for pk, _ in text_rows[:5]}


# A filtered set this small (a small workspace in a big table, narrow filters) is ranked exactly: walking
# the HNSW graph until enough of its few lessons turn up visits up to hnsw.max_scan_tuples rows (a
# 3-lesson workspace beside 200,000 lessons: ~0.7 s), while its exact distances cost well under a millisecond.
VECTOR_EXACT_BELOW = 1000


def vector_candidates(base: Any, model_id: str) -> list[int] | None:
    """The ids of ``base`` with a vector of this model, if at most ``VECTOR_EXACT_BELOW`` (ranked exactly);
    else None (the HNSW index is walked). Whether there are more is asked first, as one row past the bound:
    on a big table that is one short read, where fetching the first 1,001 ids cost ~3 ms of each retrieve."""
    with_vector = base.filter(embedding__isnull=False, embedding_model=model_id).order_by()
    if with_vector[VECTOR_EXACT_BELOW : VECTOR_EXACT_BELOW + 1].exists():
        return None
    return list(with_vector.values_list("id", flat=True))


def vector_branch(
    vector: Any, base: Any, depth: int, model_id: str, *, few: list[int] | EllipsisType | None = ...
) -> list[tuple[int, float]]:
    """The ``depth`` lessons of ``base`` nearest to ``vector`` (``[(id, cosine)]``, best first). ``few``: what
    ``vector_candidates`` gives for the same ``base`` and model, when the caller searches it many times."""
    if few is ...:
        few = vector_candidates(base, model_id)
    if few is not None:
        # "+ 0": an ORDER BY the HNSW index cannot serve, so the planner reads the rows by primary key.
        distance = CosineDistance("embedding", list(map(float, vector))) + Value(0.0)
        exact = Lesson.objects.filter(pk__in=few).annotate(distance=distance).order_by("distance", "id")
        return [(pk, 1.0 - float(d)) for pk, d in exact.values_list("id", "distance")[:depth]]
    with transaction.atomic(savepoint=False):
        with connection.cursor() as cursor:
            # One round trip for both settings. With filters (workspace, tags…) keep walking the graph
            # until enough rows pass them (pgvector ≥ 0.8); "relaxed" order is put right by the sort below.
            cursor.execute(
                "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                [str(max(settings.RETRIEVAL_EF_SEARCH, depth))],
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
    """Lessons whose tags equal query words (or hyphen-joined word pairs), most shared tags first. At most
    ``RETRIEVAL_MAX_TAG_CANDIDATES`` candidate tags (the task's words first, then word pairs), and at most
    ``RETRIEVAL_TEXT_CANDIDATES`` matching lessons are read and ranked; on a big table, tags in more than
    ``RETRIEVAL_COMMON_SHARE`` of lessons are left out as the full-text branch's common words are (a
    tag in 4% of 100k synthetic lessons made the branch 105 ms p50)."""
    words = query_terms(query)
    plain = [w for w in words if "-" not in w]
    ordered = list(dict.fromkeys([*words, *(f"{a}-{b}" for a, b in itertools.pairwise(plain))]))
    _, rows_now = _term_frequencies()
    if rows_now >= settings.RETRIEVAL_PRUNE_FROM_ROWS:  # a big table: tags most lessons have say little
        common = _stats_cache["tags"]
        ordered = [tag for tag in ordered if common.get(tag, 0.0) <= settings.RETRIEVAL_COMMON_SHARE]
    wanted = set(ordered[: settings.RETRIEVAL_MAX_TAG_CANDIDATES])
    if not wanted:
        return []
    # Through the tags GIN index, never a walk of the workspace's rows filtering tags: with a bound the
    # planner bets that enough rows match early, and when few or none do (rare words as tags) it read every
    # lesson of the workspace (200,000 rows: ~1 s, docs/benchmarks.md). The settings are put back after
    # (inside the request's transaction a SET LOCAL would outlive this query; a failure rolls them back).
    # savepoint=False: no SAVEPOINT/RELEASE round trips inside the request's transaction (a failure there
    # rolls the whole transaction back, the settings with it).
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('enable_indexscan'), current_setting('enable_seqscan'), "
            "set_config('enable_indexscan', 'off', true), set_config('enable_seqscan', 'off', true)"
        )
        previous = list(cursor.fetchone()[:2])
        rows = list(
            base.filter(tags__overlap=sorted(wanted))
            .order_by()
            .values_list("id", "tags", "score")[: settings.RETRIEVAL_TEXT_CANDIDATES]
        )
        cursor.execute(
            "SELECT set_config('enable_indexscan', %s, true), set_config('enable_seqscan', %s, true)", previous
        )
    ranked = sorted(
        ((pk, len(wanted.intersection(tags)), score) for pk, tags, score in rows), key=lambda r: (-r[1], -r[2], -r[0])
    )
    return [(pk, float(shared)) for pk, shared, _ in ranked[:depth]]


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


def fuse_scores(
    rankings: dict[str, list[tuple[int, float]]], weights: Weights, text_mass: float
) -> list[tuple[int, float, dict[str, BranchHit]]]:
    """Score fusion (the default, chosen by bench/bench_retrieval_fusion.py): ``vector × cosine + text ×
    the share of the task's idf mass the lesson's terms cover + tags × shared tags / the most shared``. A
    lesson one branch did not find gets that branch's nothing (the vector branch's last cosine). Unlike rank
    fusion this keeps *how much* better a hit is: a task whose rare identifier only one lesson has leans on
    full text; a task of everyday words (small coverage everywhere) on the vector branch."""
    detail: dict[int, dict[str, BranchHit]] = {}
    for branch, rows in rankings.items():
        for rank, (pk, score) in enumerate(rows, start=1):
            detail.setdefault(pk, {})[branch] = BranchHit(rank, score)
    vector_rows = rankings.get("vector") or []
    vector_floor = vector_rows[-1][1] if vector_rows else 0.0
    top_tags = max((score for _, score in rankings.get("tags") or []), default=1.0) or 1.0
    mass = text_mass or 1.0
    fused: dict[int, float] = {}
    for pk, found in detail.items():
        score = 0.0
        if vector_rows and weights.vector > 0:
            score += weights.vector * (found["vector"].score if "vector" in found else vector_floor)
        if "text" in found and weights.text > 0:
            score += weights.text * min(found["text"].score / mass, 1.0)
        if "tags" in found and weights.tags > 0:
            score += weights.tags * found["tags"].score / top_tags
        fused[pk] = score
    order = sorted(fused, key=lambda pk: (-fused[pk], min(h.rank for h in detail[pk].values()), pk))
    return [(pk, fused[pk], detail[pk]) for pk in order]


def hypothetical_lesson(task: str, *, workspace: str = "") -> str:
    from lessonboard.llm import usage

    with usage.context(purpose="hyde", workspace=workspace, prompt=HYDE_PROMPT.name, version=HYDE_PROMPT.version):
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
    prefer_agent: str = "",
) -> SearchResult:
    """The top ``k`` lessons for ``query`` by reciprocal-rank fusion of the ``branches`` (see the module).
    ``branches=None`` runs every branch whose weight is above 0. ``floor=False`` (the pages: a person
    browsing) still reports the floor's verdict in the explanation but keeps the hits. ``prefer_agent``: the
    lessons that agent learned come first, each group in fused order (docs/lessons.md#scopes)."""
    with RETRIEVAL_SECONDS.time():
        return _search(
            query,
            k=k,
            filters=filters,
            hyde=hyde,
            weights=weights,
            branches=branches,
            floor=floor,
            prefer_agent=prefer_agent,
        )


def _search(
    query: str,
    *,
    k: int = 5,
    filters: Filters | None = None,
    hyde: bool = False,
    weights: Weights | None = None,
    branches: tuple[str, ...] | None = None,
    floor: bool = True,
    prefer_agent: str = "",
) -> SearchResult:
    filters = filters or Filters()
    weights = weights or Weights.from_settings()
    full_length = len(query)
    query = query[: settings.RETRIEVAL_QUERY_MAX_CHARS]
    if branches is None:
        branches = tuple(b for b in BRANCHES if weights.of(b) > 0)
    depth = max(settings.RETRIEVAL_DEPTH, k)
    base = filters.apply(Lesson.objects.all())
    explanation: dict[str, Any] = {
        "query": query,
        "rrf_k": settings.RETRIEVAL_RRF_K,
        "depth": depth,
        "weights": {b: weights.of(b) for b in BRANCHES},
        "embedding": embeddings.describe(),
        "hyde": None,
    }
    rankings: dict[str, list[tuple[int, float]]] = {}
    text_mass = 0.0
    exact = False  # the best full-text hit has the task's rare identifiers (set by the text branch)
    explanation["branches_run"] = list(branches)
    explanation["fusion"] = settings.RETRIEVAL_FUSION
    if full_length > len(query):
        explanation["truncated"] = {"from_chars": full_length, "to_chars": len(query)}
    provider = embeddings.provider() if "vector" in branches else None
    # The query embedding (the largest part of a retrieval) runs in a thread while the full-text
    # branch queries PostgreSQL: both release the GIL (the model in C, the driver on the socket).
    pending = None
    if provider is not None and query.strip() and not hyde:
        pending = _embedder_pool.submit(_embed_query, provider, query, filters.workspace)
    if "text" in branches:
        terms, left_out = analyse_terms(query, keep_rarest=provider is None, workspace=filters.workspace)
        text_mass = sum(t.idf for t in terms)
        explanation["text_idf_mass"] = round(text_mass, 6)
        detail = text_branch_detail(query, base, depth, terms=terms)
        rankings["text"] = [(pk, score) for pk, score, _ in detail]
        exact = rare_exact(detail, settings.RETRIEVAL_EXACT_MIN_IDF) and weights.text > 0
        if exact:
            # A rare identifier of the task is in the best full-text hit: lean on full text.
            weights = Weights(max(weights.text, settings.RETRIEVAL_WEIGHT_TEXT_EXACT), weights.vector, weights.tags)
            explanation["rare_identifiers"] = {"text_weight": weights.text, "exact_idf": round(detail[0][2], 4)}
        explanation["text_terms"] = sorted({lex for t in terms for lex in t.lexemes})
        if left_out["common"]:
            explanation["common_terms_left_out"] = left_out["common"]
        if left_out["over_cap"]:
            explanation["text_terms_over_cap"] = {
                "cap": settings.RETRIEVAL_MAX_TERMS,
                "dropped": left_out["over_cap"],
                "reason": f"only the {settings.RETRIEVAL_MAX_TERMS} rarest terms of the task are searched",
            }
    if "tags" in branches:
        rankings["tags"] = tag_branch(query, base, depth)
    if provider is not None and query.strip():
        embedded_text = query
        if hyde:
            try:
                embedded_text = hypothetical_lesson(query, workspace=filters.workspace)
                explanation["hyde"] = {"text": embedded_text}
            except llm.LLMError as exc:
                explanation["hyde"] = {"error": str(exc), "fallback": "query embedded as is"}
                embedded_text = query
        vector = None
        try:
            if explanation["hyde"] and "text" in explanation["hyde"]:
                vector = provider.embed_documents([embedded_text])[0]
            else:
                vector, cached = (
                    pending.result() if pending is not None else query_vectors().get(provider, query, filters.workspace)
                )
                explanation["query_vector_cached"] = cached
        except llm.LLMError as exc:
            # The embeddings endpoint is down (or the LLM breaker is open, docs/operations.md#llm-outage):
            # the search answers from the text and tag branches instead of failing.
            explanation["vector"] = f"off: {exc.message}"
            explanation["floor"] = "off: the floor needs the task's vector (embeddings unavailable)"
        if vector is not None:
            explanation["embedded_text"] = embedded_text
            rankings["vector"] = vector_branch(vector, base, depth, provider.model_id)
            if rankings["vector"]:
                agree = branches_agree(rankings["vector"], rankings.get("text") or [])
                explanation["floor"] = floor_check(
                    vector, rankings["vector"][0][1], provider, agree=agree, identifiers=exact
                )
            else:
                explanation["floor"] = "off: no lesson in the filtered set has a vector of this model yet"
    elif "vector" in branches:
        explanation["vector"] = "off: no embedding provider (lexical retrieval only)"
        explanation["floor"] = "off: the floor needs embeddings"
    explanation["terms"] = query_terms(query)
    verdict = explanation.get("floor")
    if isinstance(verdict, dict) and not verdict["passed"]:
        if verdict.get("not_software_work"):
            verdict["reason"] = (
                "no lesson applies: the task does not look like software work (score {software_score} below "
                "{minimum})".format(minimum=settings.RETRIEVAL_FLOOR_SOFTWARE_MIN, **verdict)
            )
        else:
            verdict["reason"] = (
                "no lesson applies: the closest lesson (similarity {best_similarity}) is not closer to the task "
                "than everyday off-topic text ({background_similarity}) by the margin {margin}".format(**verdict)
            )
        if floor:
            return SearchResult([], explanation, verdict["reason"])
    if settings.RETRIEVAL_FUSION == "score":
        fused = fuse_scores(rankings, weights, text_mass)
    else:
        fused = fuse(rankings, weights, settings.RETRIEVAL_RRF_K)
    if prefer_agent:
        fused = agent_first(fused, prefer_agent)
        explanation["agent_first"] = prefer_agent
    fused = fused[:k]
    lessons = Lesson.objects.select_related("workspace").in_bulk([pk for pk, _, _ in fused])
    hits = [Hit(lessons[pk], score, detail) for pk, score, detail in fused if pk in lessons]
    reason = "" if hits else "no lesson matches the task and the filters"
    return SearchResult(hits, explanation, reason)


def agent_first(fused: list[Any], agent: str) -> list[Any]:
    """The fused rows of lessons ``agent`` learned first, then the others, each group in its fused order."""
    mine = set(Lesson.objects.filter(pk__in=[row[0] for row in fused], agent=agent).values_list("pk", flat=True))
    return [row for row in fused if row[0] in mine] + [row for row in fused if row[0] not in mine]


def similar_to(lesson: Lesson, *, k: int = 5, filters: Filters | None = None) -> SearchResult:
    """ "Find similar": the lesson's own text as the query, the lesson itself left out."""
    text = f"{lesson.situation} {lesson.correction} {' '.join(lesson.tags)}"
    result = search(text, k=k + 1, filters=filters, floor=False)
    result.hits = [hit for hit in result.hits if hit.lesson.pk != lesson.pk][:k]
    return result
