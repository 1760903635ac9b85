"""Browser tests reuse the review and triage fixtures, with a clean cache per test."""

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
