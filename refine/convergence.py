"""chatcli's convergence cascade (docs/compat/chatcli.md#convergence): char → Jaccard → embedding, with the embedding scorer's
LRU cache and circuit breaker, strict and permissive modes, and ``degraded_from`` on every fallback.

Time comes only from ``now`` (``django.utils.timezone.now`` unless a caller passes another clock), so
the TTL and the breaker's cool-down can be pinned in tests.
"""

from __future__ import annotations

import hashlib
import math
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.utils import timezone

from refine.embedder import Embedder, resolve_embedder
from refine.scorers import Cost, Score, char_score, clamp, jaccard_score

Clock = Callable[[], datetime]

# chatcli's defaults (docs/compat/chatcli.md#configuration, docs/compat/chatcli.md#embedding-scorer, docs/compat/chatcli.md#convergence-breaker, docs/compat/chatcli.md#convergence-decision).
CHAR_HIGH, CHAR_LOW, JACCARD_HIGH, EMBEDDING_SIM = 0.99, 0.3, 0.95, 0.92
JACCARD_MIN_CONFIDENCE = 0.6  # hard-coded in chatcli's Check, in place of the unused MinTokensForJaccard
CACHE_SIZE, CACHE_TTL = 256, timedelta(minutes=5)
BREAKER_THRESHOLD, BREAKER_COOLDOWN = 3, timedelta(seconds=30)
EMBED_TIMEOUT = 15.0


# --- LRU cache (docs/compat/chatcli.md#convergence-cache) -------------------------------------------------------------------------------
def cache_key(text: str) -> str:
    """Lowercase hex of the first 16 bytes of SHA-256 of the exact text (no normalisation)."""
    return hashlib.sha256(text.encode()).digest()[:16].hex()


class EmbeddingCache:
    """Size ≤ 0 = unbounded; TTL ≤ 0 = no expiry. An entry older than the TTL (strictly) is a miss and
    is evicted; a hit moves it to most-recent without refreshing its age."""

    def __init__(self, *, size: int = CACHE_SIZE, ttl: timedelta = CACHE_TTL, now: Clock = timezone.now) -> None:
        self.size = size
        self.ttl = ttl
        self.now = now
        self._entries: OrderedDict[str, tuple[list[float], datetime]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, text: str) -> list[float] | None:
        key = cache_key(text)
        entry = self._entries.get(key)
        if entry is None:
            return None
        vector, stored_at = entry
        if self.ttl > timedelta(0) and self.now() - stored_at > self.ttl:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return vector

    def put(self, text: str, vector: list[float]) -> None:
        if not vector:
            return
        key = cache_key(text)
        self._entries[key] = (vector, self.now())
        self._entries.move_to_end(key)
        while self.size > 0 and len(self._entries) > self.size:
            self._entries.popitem(last=False)


# --- circuit breaker (docs/compat/chatcli.md#convergence-breaker) -------------------------------------------------------------------------
class BreakerState:
    CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class CircuitBreaker:
    def __init__(
        self, *, threshold: int = BREAKER_THRESHOLD, cooldown: timedelta = BREAKER_COOLDOWN, now: Clock = timezone.now
    ) -> None:
        self.threshold = threshold if threshold > 0 else BREAKER_THRESHOLD
        self.cooldown = cooldown if cooldown > timedelta(0) else BREAKER_COOLDOWN
        self.now = now
        self.state = BreakerState.CLOSED
        self.failures = 0
        self.opened_at: datetime | None = None

    def allow(self) -> bool:
        """Closed and half-open allow; open allows only once the cool-down has elapsed, which turns it
        half-open (chatcli puts no limit on concurrent half-open probes)."""
        if self.state != BreakerState.OPEN:
            return True
        assert self.opened_at is not None
        if self.now() - self.opened_at >= self.cooldown:
            self.state = BreakerState.HALF_OPEN
            return True
        return False

    def failure(self) -> None:
        self.failures += 1  # not reset on opening, as chatcli
        if self.state == BreakerState.HALF_OPEN or self.failures >= self.threshold:
            self.state = BreakerState.OPEN
            self.opened_at = self.now()

    def success(self) -> None:
        self.failures = 0
        if self.state == BreakerState.HALF_OPEN:
            self.state = BreakerState.CLOSED


# --- embedding scorer (docs/compat/chatcli.md#embedding-scorer) ------------------------------------------------------------------------
class ScorerError(Exception):
    def __init__(self, message: str, score: Score) -> None:
        super().__init__(message)
        self.score = score


def float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def cosine(a: list[float], b: list[float]) -> float:
    """Cosine in float64 rounded to float32; 0 for different lengths, empty vectors, NaN/Inf or a zero norm."""
    if len(a) != len(b) or not a:
        return 0.0
    dot = norm_a = norm_b = 0.0
    for x, y in zip(a, b, strict=True):
        if not (math.isfinite(x) and math.isfinite(y)):
            return 0.0
        dot += x * y
        norm_a += x * x
        norm_b += y * y
    if norm_a == 0 or norm_b == 0:
        return 0.0
    return float32(dot / (math.sqrt(norm_a) * math.sqrt(norm_b)))


class EmbeddingScorer:
    name = "embedding"

    def __init__(
        self,
        embedder: Embedder | None,
        *,
        cache: EmbeddingCache | None = None,
        breaker: CircuitBreaker | None = None,
        now: Clock = timezone.now,
    ) -> None:
        self.embedder = embedder
        self.cache = cache if cache is not None else EmbeddingCache(now=now)
        self.breaker = breaker if breaker is not None else CircuitBreaker(now=now)

    def available(self) -> bool:
        return self.embedder is not None and self.breaker.allow()

    def _vector(self, text: str) -> list[float]:
        cached = self.cache.get(text)
        if cached is not None:
            return cached
        assert self.embedder is not None
        vectors = self.embedder([text])
        if len(vectors) != 1:
            raise ValueError(f"embedder returned {len(vectors)} vectors for 1 text")
        self.cache.put(text, vectors[0])
        return vectors[0]

    def score(self, a: str, b: str) -> Score:
        started = time.perf_counter()
        if self.embedder is None:
            raise ScorerError("no embedding provider", Score(degraded_from="no_provider"))
        if not self.breaker.allow():
            raise ScorerError("embedding breaker open", Score(degraded_from="breaker_open"))
        try:
            va, vb = self._vector(a), self._vector(b)
        except Exception as exc:  # any provider failure counts against the breaker
            self.breaker.failure()
            raise ScorerError(f"embedding provider error: {exc}", Score(degraded_from="provider_error")) from exc
        self.breaker.success()
        similarity = clamp((cosine(va, vb) + 1) / 2)
        cost = Cost(duration_ms=(time.perf_counter() - started) * 1000, embed_queries=2)
        return Score(similarity, 0.9, cost)


# --- the composite decision (docs/compat/chatcli.md#convergence-decision) --------------------------------------------------------------------
@dataclass
class TrailEntry:
    scorer: str
    score: Score
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"scorer": self.scorer, **self.score.as_dict(), "error": self.error}


@dataclass
class Check:
    """What ``Cascade.check`` decided: converged or not, the deciding score and scorer, why, every
    scorer consulted (the trail), and an ``error`` when strict mode refused to decide."""

    converged: bool
    score: Score
    decided_by: str
    reason: str
    trail: list[TrailEntry] = field(default_factory=list)
    error: str = ""

    @property
    def degraded_from(self) -> str:
        return self.score.degraded_from

    def as_dict(self) -> dict[str, Any]:
        return {
            "converged": self.converged,
            "decided_by": self.decided_by,
            "reason": self.reason,
            "similarity": self.score.similarity,
            "confidence": self.score.confidence,
            "degraded_from": self.score.degraded_from,
            "error": self.error,
            "trail": [entry.as_dict() for entry in self.trail],
        }


class Checker(Protocol):
    def check(self, a: str, b: str) -> Check: ...


@dataclass
class Thresholds:
    char_high: float = CHAR_HIGH
    char_low: float = CHAR_LOW
    jaccard_high: float = JACCARD_HIGH
    embedding_sim: float = EMBEDDING_SIM

    def __post_init__(self) -> None:
        # chatcli: any threshold ≤ 0 means "use the default".
        for name, default in (
            ("char_high", CHAR_HIGH),
            ("char_low", CHAR_LOW),
            ("jaccard_high", JACCARD_HIGH),
            ("embedding_sim", EMBEDDING_SIM),
        ):
            if getattr(self, name) <= 0:
                setattr(self, name, default)


class Cascade:
    """``check(a, b)``: char decides the clear cases, Jaccard the near-rewordings, the embedding stage
    (only when one is wired) the rest; anything unscorable falls back, saying so in ``degraded_from``."""

    def __init__(
        self,
        *,
        thresholds: Thresholds | None = None,
        embedding: EmbeddingScorer | None = None,
        strict: bool = False,
        use_char: bool = True,
        use_jaccard: bool = True,
    ) -> None:
        self.thresholds = thresholds or Thresholds()
        self.embedding = embedding
        self.strict = strict
        self.use_char = use_char
        self.use_jaccard = use_jaccard

    def check(self, a: str, b: str) -> Check:
        t = self.thresholds
        trail: list[TrailEntry] = []
        if self.use_char:
            started = time.perf_counter()
            char = char_score(a, b)
            char.cost.duration_ms = (time.perf_counter() - started) * 1000
            trail.append(TrailEntry("char", char))
            if char.similarity >= t.char_high:
                return Check(True, char, "char", f"char {char.similarity:.4f} ≥ {t.char_high}", trail)
            if char.similarity < t.char_low:
                return Check(False, char, "char", f"char {char.similarity:.4f} < {t.char_low}: diverged", trail)
        jaccard: Score | None = None
        if self.use_jaccard:
            started = time.perf_counter()
            jaccard = jaccard_score(a, b)
            jaccard.cost.duration_ms = (time.perf_counter() - started) * 1000
            trail.append(TrailEntry("jaccard", jaccard))
            if jaccard.similarity >= t.jaccard_high and jaccard.confidence >= JACCARD_MIN_CONFIDENCE:
                reason = (
                    f"jaccard {jaccard.similarity:.4f} ≥ {t.jaccard_high} with confidence "
                    f"{jaccard.confidence:.2f} ≥ {JACCARD_MIN_CONFIDENCE}"
                )
                return Check(True, jaccard, "jaccard", reason, trail)
        if self.embedding is not None:
            if self.embedding.available():
                try:
                    emb = self.embedding.score(a, b)
                except ScorerError as exc:
                    trail.append(TrailEntry("embedding", exc.score, str(exc)))
                else:
                    trail.append(TrailEntry("embedding", emb))
                    converged = emb.similarity >= t.embedding_sim
                    op = "≥" if converged else "<"
                    return Check(
                        converged, emb, "embedding", f"embedding {emb.similarity:.4f} {op} {t.embedding_sim}", trail
                    )
            elif self.strict:
                score = Score(0.0, 0.0, degraded_from="embedding_unavailable")
                reason = "strict mode: the embedding scorer is unavailable (breaker open), so no decision"
                return Check(False, score, "embedding", reason, trail, error="embedding scorer unavailable")
        if jaccard is not None:
            fallback = Score(jaccard.similarity, jaccard.confidence, Cost(), "embedding_to_jaccard")
            converged = jaccard.similarity >= t.jaccard_high
            op = "≥" if converged else "<"
            reason = f"fallback to jaccard {jaccard.similarity:.4f} {op} {t.jaccard_high} (no confidence requirement)"
            return Check(converged, fallback, "jaccard", reason, trail)
        if trail:
            first = trail[0]
            fallback = Score(first.score.similarity, first.score.confidence, Cost(), "char_only")
            converged = first.score.similarity >= t.char_high
            return Check(converged, fallback, first.scorer, f"fallback to {first.scorer} alone", trail)
        return Check(False, Score(), "", "no scorer configured", trail)


# --- the configured cascade ------------------------------------------------------------------------------
def cascade_from_settings(*, embedder: Embedder | None = None, now: Clock = timezone.now) -> Cascade | None:
    """The cascade as the settings describe it, or ``None`` when convergence checking is off (the pass
    loop then uses the legacy char heuristic). The embedding stage exists only when enabled and an
    embedder resolves."""
    if not settings.REFINE_CONVERGENCE_ENABLED:
        return None
    embedding: EmbeddingScorer | None = None
    if settings.REFINE_CONVERGENCE_EMBEDDING:
        embedder = embedder if embedder is not None else resolve_embedder()
        if embedder is not None:
            size, ttl_min = settings.REFINE_CACHE_SIZE, settings.REFINE_CACHE_TTL_MIN
            if size <= 0 and ttl_min <= 0:  # chatcli: both unset → the whole config takes the defaults
                size, ttl_min = CACHE_SIZE, int(CACHE_TTL.total_seconds() // 60)
            embedding = EmbeddingScorer(
                embedder,
                cache=EmbeddingCache(size=size, ttl=timedelta(minutes=ttl_min), now=now),
                breaker=CircuitBreaker(
                    threshold=settings.REFINE_BREAKER_THRESHOLD,
                    cooldown=timedelta(seconds=settings.REFINE_BREAKER_COOLDOWN),
                    now=now,
                ),
                now=now,
            )
    return Cascade(
        thresholds=Thresholds(
            char_high=settings.REFINE_CHAR_HIGH,
            char_low=settings.REFINE_CHAR_LOW,
            jaccard_high=settings.REFINE_JACCARD_HIGH,
            embedding_sim=settings.REFINE_EMBEDDING_SIM,
        ),
        embedding=embedding,
        strict=settings.REFINE_CONVERGENCE_STRICT,
    )


_process_cascade: tuple[tuple[Any, ...], Cascade | None] | None = None


def process_cascade() -> Cascade | None:
    """One cascade per worker process (so its cache and breaker outlive a single run, like chatcli's
    per-session scorer), rebuilt when the settings it reads change."""
    global _process_cascade
    key = tuple(
        getattr(settings, name)
        for name in (
            "REFINE_CONVERGENCE_ENABLED",
            "REFINE_CONVERGENCE_EMBEDDING",
            "REFINE_CONVERGENCE_STRICT",
            "REFINE_CHAR_HIGH",
            "REFINE_CHAR_LOW",
            "REFINE_JACCARD_HIGH",
            "REFINE_EMBEDDING_SIM",
            "REFINE_CACHE_SIZE",
            "REFINE_CACHE_TTL_MIN",
            "REFINE_BREAKER_THRESHOLD",
            "REFINE_BREAKER_COOLDOWN",
            "REFINE_EMBEDDER",
            "REFINE_EMBEDDING_MODEL",
            "LLM_BASE_URL",
        )
    )
    if _process_cascade is None or _process_cascade[0] != key:
        _process_cascade = (key, cascade_from_settings())
    return _process_cascade[1]
