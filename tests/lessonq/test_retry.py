"""Retry policy (docs/compat/chatcli.md#retry, docs/compat/chatcli.md#test-vectors)."""

from __future__ import annotations

import random

import pytest

from lessonq.retry import RetryPolicy


def test_it_doubles_without_jitter() -> None:
    p = RetryPolicy(initial_delay=0.1, multiplier=2, jitter=0)
    assert [round(p.delay(n), 6) for n in range(1, 6)] == [0.1, 0.2, 0.4, 0.8, 1.6]


def test_it_caps_at_max_delay() -> None:
    assert RetryPolicy(initial_delay=1, max_delay=5, multiplier=10, jitter=0).delay(5) == 5


def test_it_jitters_within_the_fraction() -> None:
    p = RetryPolicy(initial_delay=0.1, multiplier=1, jitter=0.25)
    rng = random.Random(42)
    draws = [p.delay(1, rng) for _ in range(1000)]
    assert all(0.075 <= d < 0.125 for d in draws)
    assert max(draws) - min(draws) > 0.03


def test_it_applies_jitter_after_the_cap() -> None:
    p = RetryPolicy(initial_delay=300, max_delay=300, jitter=0.2)
    assert p.delay(10, random.Random(1)) != 300


@pytest.mark.parametrize(("attempts", "expected"), [(0, True), (1, True), (2, True), (3, False), (4, False)])
def test_it_retries_below_max_attempts(attempts: int, expected: bool) -> None:
    assert RetryPolicy(max_attempts=3).should_retry(attempts) is expected


def test_a_zero_policy_still_works() -> None:
    p = RetryPolicy(initial_delay=0, max_delay=0, multiplier=0, jitter=0, max_attempts=0)
    assert p.delay(1) > 0 and p.should_retry(0)
