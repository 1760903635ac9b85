"""The convergence cascade (docs/compat/chatcli.md#convergence, vectors docs/compat/chatcli.md#test-vectors): every branch, the LRU cache and the breaker."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from refine.convergence import (
    BreakerState,
    Cascade,
    CircuitBreaker,
    EmbeddingCache,
    EmbeddingScorer,
    cache_key,
    cascade_from_settings,
    cosine,
)
from refine.embedder import llm_embedder, resolve_embedder
from tests.fakes.openai_server import Reply

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def constant_embedder(vector):
    calls = []

    def embed(texts):
        calls.append(list(texts))
        return [list(vector) for _ in texts]

    embed.calls = calls
    return embed


def failing_embedder():
    calls = []

    def embed(texts):
        calls.append(list(texts))
        raise ConnectionError("embedder down")

    embed.calls = calls
    return embed


# --- the cascade with real scorers and defaults ----------------------------------------------------------
def test_it_converges_by_char_on_identical_text_without_asking_jaccard():
    check = Cascade().check("same text here", "same text here")
    assert check.converged and check.decided_by == "char"
    assert [e.scorer for e in check.trail] == ["char"]


def test_it_declares_divergence_by_char_without_asking_jaccard():
    check = Cascade().check("abc", "xyz")
    assert not check.converged and check.decided_by == "char"
    assert [e.scorer for e in check.trail] == ["char"]


def test_it_calls_a_pure_reordering_diverged_before_jaccard_can_see_it():
    check = Cascade().check(
        "the quick brown fox jumps over the lazy dog", "the lazy dog jumps over the quick brown fox"
    )
    assert not check.converged and check.decided_by == "char"
    assert check.score.similarity == pytest.approx(0.13953, abs=1e-5)


def test_it_converges_by_jaccard_when_confident():
    words = " ".join(f"term{i}" for i in range(30))
    a, b = f"{words} alpha.", f"alpha, {words}!"
    check = Cascade().check(a, b)
    assert check.converged and check.decided_by == "jaccard" and check.degraded_from == ""
    assert [e.scorer for e in check.trail] == ["char", "jaccard"]


def test_it_falls_back_to_jaccard_without_an_embedding_stage():
    check = Cascade().check("Use the Edit tool for large files.", "Use the Edit tool for large files!")
    # char 0.9706 is between the thresholds; Jaccard 1.0 but confidence 0.1003 < 0.6
    assert check.trail[0].score.similarity == pytest.approx(0.9706, abs=1e-4)
    assert check.converged and check.degraded_from == "embedding_to_jaccard"
    not_converged = Cascade().check(
        "Deploy the service with helm and check pods", "Deploy the service with kubectl and check logs"
    )
    assert not_converged.trail[0].score.similarity == pytest.approx(0.5435, abs=1e-4)
    assert not_converged.score.similarity == pytest.approx(3 / 7)
    assert not not_converged.converged and not_converged.degraded_from == "embedding_to_jaccard"


def test_it_lets_the_embedding_scorer_decide_the_middle_cases():
    embedder = constant_embedder([0.3, 0.4, 0.5])
    cascade = Cascade(embedding=EmbeddingScorer(embedder))
    check = cascade.check(
        "Deploy the service with helm and check pods", "Deploy the service with kubectl and check logs"
    )
    assert check.converged and check.decided_by == "embedding" and check.score.similarity == 1.0
    assert check.score.confidence == 0.9 and check.score.cost.embed_queries == 2
    assert [e.scorer for e in check.trail] == ["char", "jaccard", "embedding"]

    orthogonal = iter([[1.0, 0.0], [0.0, 1.0]])
    cascade = Cascade(embedding=EmbeddingScorer(lambda texts: [next(orthogonal)]))
    check = cascade.check(
        "Deploy the service with helm and check pods", "Deploy the service with kubectl and check logs"
    )
    assert not check.converged and check.decided_by == "embedding" and check.score.similarity == 0.5


def test_it_degrades_to_jaccard_when_the_embedder_fails_in_permissive_mode():
    embedder = failing_embedder()
    cascade = Cascade(embedding=EmbeddingScorer(embedder))
    check = cascade.check("Use the Edit tool for large files.", "Use the Edit tool for large files!")
    assert check.converged and check.degraded_from == "embedding_to_jaccard"
    assert check.trail[-1].scorer == "embedding" and check.trail[-1].score.degraded_from == "provider_error"
    assert check.error == ""


def test_it_refuses_to_decide_in_strict_mode_when_the_embedder_is_down():
    embedder = failing_embedder()
    scorer = EmbeddingScorer(embedder, breaker=CircuitBreaker(threshold=1))
    cascade = Cascade(embedding=scorer, strict=True)
    a, b = "Use the Edit tool for large files.", "Use the Edit tool for large files!"
    first = cascade.check(a, b)  # the failure itself falls through, even in strict mode (as chatcli)
    assert first.converged and first.degraded_from == "embedding_to_jaccard"
    assert scorer.breaker.state == BreakerState.OPEN
    down = cascade.check(a, b)
    assert not down.converged and down.error
    assert down.degraded_from == "embedding_unavailable" and down.score.similarity == 0.0
    assert len(embedder.calls) == 1  # the open breaker kept the provider out of it
    permissive = Cascade(embedding=scorer, strict=False).check(a, b)
    assert permissive.converged and permissive.degraded_from == "embedding_to_jaccard" and not permissive.error


def test_it_errors_in_strict_mode_with_no_provider():
    check = Cascade(embedding=EmbeddingScorer(None), strict=True).check("abcd efgh ijkl", "abcd efgh mnop")
    assert not check.converged and check.error
    assert [e.scorer for e in check.trail] == ["char", "jaccard"]


def test_it_decides_by_char_alone_when_jaccard_is_off():
    check = Cascade(use_jaccard=False).check("hello world!", "hello world?")
    assert check.degraded_from == "char_only" and not check.converged


def test_it_reports_the_embedding_scorer_errors():
    with pytest.raises(Exception, match="no embedding provider"):
        EmbeddingScorer(None).score("a", "b")


def test_it_computes_cosine_with_chatclis_edge_cases():
    assert cosine([1.0, 0.0], [1.0, 0.0]) == 1.0
    assert cosine([1.0], [1.0, 0.0]) == 0.0
    assert cosine([], []) == 0.0
    assert cosine([0.0, 0.0], [1.0, 0.0]) == 0.0
    assert cosine([float("nan"), 1.0], [1.0, 1.0]) == 0.0
    assert cosine([1.0, 2.0], [2.0, 1.0]) == pytest.approx(0.8, abs=1e-7)


# --- LRU cache ------------------------------------------------------------------------------------------
def test_it_keys_the_cache_by_the_first_16_bytes_of_sha256():
    assert cache_key("hello") == "2cf24dba5fb0a30e26e83b2ac5b9e29e"
    assert cache_key("Hello") != cache_key("hello")


def test_it_returns_and_evicts_least_recent_entries():
    cache = EmbeddingCache(size=4, ttl=timedelta(0))
    cache.put("hello", [1.0, 2.0])
    assert cache.get("hello") == [1.0, 2.0]
    small = EmbeddingCache(size=2, ttl=timedelta(0))
    for text in ("a", "b", "c"):
        small.put(text, [1.0])
    assert small.get("a") is None and small.get("b") == [1.0] and small.get("c") == [1.0]
    small.put("d", [])  # empty vectors are ignored
    assert small.get("d") is None and len(small) == 2


def test_it_moves_a_hit_to_most_recent():
    cache = EmbeddingCache(size=2, ttl=timedelta(0))
    cache.put("a", [1.0])
    cache.put("b", [2.0])
    cache.get("a")
    cache.put("c", [3.0])
    assert cache.get("a") == [1.0] and cache.get("b") is None


def test_it_hits_within_the_ttl_and_misses_one_past_it():
    with time_machine.travel(T0, tick=False) as clock:
        cache = EmbeddingCache(size=8, ttl=timedelta(minutes=5))
        cache.put("draft", [0.5])
        clock.move_to(T0 + timedelta(minutes=2))
        assert cache.get("draft") == [0.5]  # a hit does not refresh the age
        clock.move_to(T0 + timedelta(minutes=5))
        assert cache.get("draft") == [0.5]  # at the limit: still fresh (expiry is strictly older)
        clock.move_to(T0 + timedelta(minutes=5, microseconds=1))
        assert cache.get("draft") is None
        assert len(cache) == 0  # evicted


def test_it_refreshes_the_timestamp_when_a_key_is_put_again():
    with time_machine.travel(T0, tick=False) as clock:
        cache = EmbeddingCache(size=8, ttl=timedelta(minutes=5))
        cache.put("draft", [0.5])
        clock.move_to(T0 + timedelta(minutes=4))
        cache.put("draft", [0.7])
        clock.move_to(T0 + timedelta(minutes=8))
        assert cache.get("draft") == [0.7]


def test_it_saves_provider_calls_with_the_cache_until_the_ttl_passes():
    embedder = constant_embedder([1.0, 0.0])
    with time_machine.travel(T0, tick=False) as clock:
        scorer = EmbeddingScorer(embedder, cache=EmbeddingCache(size=16, ttl=timedelta(minutes=5)))
        scorer.score("first text", "second text")
        scorer.score("first text", "second text")
        assert len(embedder.calls) == 2  # one per text, then both cached
        clock.move_to(T0 + timedelta(minutes=5, seconds=1))
        scorer.score("first text", "second text")
        assert len(embedder.calls) == 4
        assert all(len(batch) == 1 for batch in embedder.calls)  # batches of one


# --- circuit breaker ---------------------------------------------------------------------------------------
def test_it_opens_the_breaker_after_threshold_failures():
    breaker = CircuitBreaker(threshold=3, cooldown=timedelta(minutes=1))
    for _ in range(3):
        assert breaker.allow()
        breaker.failure()
    assert not breaker.allow() and breaker.state == BreakerState.OPEN


def test_it_resets_the_count_on_success():
    breaker = CircuitBreaker(threshold=3, cooldown=timedelta(minutes=1))
    breaker.failure(), breaker.failure(), breaker.success(), breaker.failure(), breaker.failure()
    assert breaker.allow() and breaker.state == BreakerState.CLOSED


def test_it_half_opens_at_the_end_of_the_cooldown_and_closes_on_success():
    with time_machine.travel(T0, tick=False) as clock:
        breaker = CircuitBreaker(threshold=3, cooldown=timedelta(seconds=30))
        for _ in range(3):
            breaker.failure()
        clock.move_to(T0 + timedelta(seconds=30) - timedelta(microseconds=1))
        assert not breaker.allow() and breaker.state == BreakerState.OPEN
        clock.move_to(T0 + timedelta(seconds=30))
        assert breaker.allow() and breaker.state == BreakerState.HALF_OPEN
        assert breaker.allow()  # no limit on half-open probes
        breaker.success()
        assert breaker.state == BreakerState.CLOSED and breaker.failures == 0


def test_it_reopens_at_once_when_the_half_open_probe_fails():
    with time_machine.travel(T0, tick=False) as clock:
        breaker = CircuitBreaker(threshold=3, cooldown=timedelta(seconds=30))
        for _ in range(3):
            breaker.failure()
        clock.move_to(T0 + timedelta(seconds=31))
        assert breaker.allow()
        breaker.failure()
        assert breaker.state == BreakerState.OPEN and breaker.opened_at == T0 + timedelta(seconds=31)
        clock.move_to(T0 + timedelta(seconds=60))
        assert not breaker.allow()
        clock.move_to(T0 + timedelta(seconds=61))
        assert breaker.allow()


def test_it_uses_chatclis_defaults_for_non_positive_breaker_settings():
    breaker = CircuitBreaker(threshold=0, cooldown=timedelta(0))
    assert breaker.threshold == 3 and breaker.cooldown == timedelta(seconds=30)


def test_it_skips_the_provider_while_the_breaker_is_open_and_probes_after_the_cooldown():
    embedder = failing_embedder()
    with time_machine.travel(T0, tick=False) as clock:
        scorer = EmbeddingScorer(embedder, breaker=CircuitBreaker(threshold=3, cooldown=timedelta(seconds=30)))
        cascade = Cascade(embedding=scorer)
        a, b = "Deploy the service with helm and check pods", "Deploy the service with kubectl and check logs"
        for _ in range(5):
            cascade.check(a, b)
        assert len(embedder.calls) == 3 and scorer.breaker.state == BreakerState.OPEN
        clock.move_to(T0 + timedelta(seconds=30))
        check = cascade.check(a, b)
        assert len(embedder.calls) == 4 and scorer.breaker.state == BreakerState.OPEN
        assert check.trail[-1].score.degraded_from == "provider_error"


# --- the configured embedder: the gateway against the fake OpenAI server -------------------------------------
def test_it_scores_through_the_gateway_embeddings_endpoint(fake_openai, settings):
    settings.REFINE_CONVERGENCE_EMBEDDING = True
    settings.REFINE_EMBEDDER = "llm"
    fake_openai.embedding_fn = lambda text: [1.0, 1.0, 0.0]
    cascade = cascade_from_settings()
    assert cascade is not None and cascade.embedding is not None
    check = cascade.check(
        "Deploy the service with helm and check pods", "Deploy the service with kubectl and check logs"
    )
    assert check.decided_by == "embedding" and check.converged
    embeds = [r for r in fake_openai.requests if r.path.endswith("/embeddings")]
    assert [r.json["input"] for r in embeds] == [
        ["Deploy the service with helm and check pods"],
        ["Deploy the service with kubectl and check logs"],
    ]
    assert embeds[0].json["model"] == settings.REFINE_EMBEDDING_MODEL


def test_it_degrades_when_the_gateway_embeddings_endpoint_fails(fake_openai, settings):
    fake_openai.script_embeddings(Reply(status=500))
    scorer = EmbeddingScorer(llm_embedder(model="m", timeout=5))
    check = Cascade(embedding=scorer).check("Use the Edit tool for large files.", "Use the Edit tool for large files!")
    assert check.degraded_from == "embedding_to_jaccard"
    assert check.trail[-1].score.degraded_from == "provider_error"
    assert scorer.breaker.failures == 1


def test_it_has_no_embedding_stage_by_default(settings):
    cascade = cascade_from_settings()
    assert cascade is not None and cascade.embedding is None
    settings.REFINE_CONVERGENCE_ENABLED = False
    assert cascade_from_settings() is None


def test_it_resolves_an_embedder_from_a_dotted_path(settings):
    settings.REFINE_EMBEDDER = "tests.refine.test_convergence:dotted_embedder"
    assert resolve_embedder() is dotted_embedder
    settings.REFINE_EMBEDDER = "none"
    assert resolve_embedder() is None
    settings.REFINE_EMBEDDER = "no-colon"
    with pytest.raises(Exception, match="LESSONBOARD_REFINE_EMBEDDER"):
        resolve_embedder()


def dotted_embedder(texts):
    return [[1.0] for _ in texts]
