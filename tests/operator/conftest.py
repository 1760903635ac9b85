"""Operator-page fixtures: a clean cache per test (tab counts, error groups, nav counts and dependency states
are cached). Job rows and staged proposals come from tests/support/ (``jobs``, ``stage``)."""

from collections.abc import Iterator

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()
