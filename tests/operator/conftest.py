"""Operator-page fixtures: the queue's job rows (triage) and staged proposals (reviews), re-exported; and a
clean cache per test (tab counts, error groups, nav counts and dependency states are cached)."""

from collections.abc import Iterator

import pytest
from django.core.cache import cache

from tests.review.conftest import stage  # noqa: F401
from tests.triage.conftest import jobs, queue_dir  # noqa: F401


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()
