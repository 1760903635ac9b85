from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def test_broker() -> Any:
    """Publish to the broker the session worker consumes.

    Celery loads ``app.conf`` from Django settings on first access; when the first access happens inside
    a test that overrides ``CELERY_BROKER_URL`` (``tests/lessonboard/test_health.py`` points it at
    ``redis://127.0.0.1:1``), the bad URL sticks for the rest of the session. Put the real one back.
    """
    from django.conf import settings

    from lessonboard.celery import app

    original = app.conf.broker_url
    if original != settings.CELERY_BROKER_URL:
        app.conf.broker_url = settings.CELERY_BROKER_URL
        _reset_pools(app)
    yield app
    if original != settings.CELERY_BROKER_URL:
        app.conf.broker_url = original
        _reset_pools(app)


def _reset_pools(app: Any) -> None:
    # Connection and producer pools are built once from the broker URL of the moment: drop our references
    # (not close them: kombu's global registry hands the same producer pool out again per URL).
    app._pool = None
    app.amqp._producer_pool = None
