"""chatcli's retry policy (docs/compat/chatcli.md#retry): exponential backoff, capped, jitter applied after the cap."""

from __future__ import annotations

import random
from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class RetryPolicy:
    initial_delay: float = 1.0
    max_delay: float = 300.0
    multiplier: float = 2.0
    jitter: float = 0.2
    max_attempts: int = 5

    def normalized(self) -> RetryPolicy:
        initial = self.initial_delay if self.initial_delay > 0 else 1.0
        max_delay = self.max_delay if self.max_delay > 0 else 300.0
        return RetryPolicy(
            initial_delay=initial,
            max_delay=max(max_delay, initial),
            multiplier=self.multiplier if self.multiplier >= 1.0 else 2.0,
            jitter=min(max(self.jitter, 0.0), 0.5),
            max_attempts=self.max_attempts if self.max_attempts >= 1 else 5,
        )

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (≥ 1)."""
        p = self.normalized()
        n = max(attempt, 1)
        base = p.initial_delay
        for _ in range(n - 1):
            base *= p.multiplier
            if base >= p.max_delay:
                base = p.max_delay
                break
        base = min(base, p.max_delay)
        if p.jitter > 0:
            u = (rng or random).random()
            base = base * (1 + (2 * u - 1) * p.jitter)
        return max(base, 0.0)

    def should_retry(self, attempts: int) -> bool:
        return attempts < self.normalized().max_attempts


def policy() -> RetryPolicy:
    return RetryPolicy(
        initial_delay=settings.LESSONQ_INITIAL_DELAY,
        max_delay=settings.LESSONQ_MAX_DELAY,
        multiplier=2.0,
        jitter=settings.LESSONQ_JITTER,
        max_attempts=settings.LESSONQ_MAX_ATTEMPTS,
    ).normalized()
