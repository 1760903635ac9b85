"""``POST /api/v1/refine`` holds a web thread only while fewer than LESSONBOARD_REFINE_API_MAX_WAITERS
requests of its process already wait (docs/operations.md#web-under-load)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lessonboard import waiting
from refine import api_views
from refine.models import RefineRun
from tests.support.refine import ORIGINAL

pytestmark = pytest.mark.django_db


@pytest.fixture
def waits(monkeypatch: Any) -> list[float]:
    """Every pause the view takes while it waits for its run (returns at once: no real waiting)."""
    taken: list[float] = []

    class Pause:
        def wait(self, timeout: float) -> bool:
            taken.append(timeout)
            return False

    monkeypatch.setattr(waiting, "sleep", Pause().wait)
    return taken


def test_it_waits_for_the_run_while_a_wait_slot_is_free(api, settings, monkeypatch, waits):
    settings.REFINE_API_WAIT = 0.2
    monkeypatch.setattr(api_views, "_waiters", threading.BoundedSemaphore(1))
    response = api.post("/api/v1/refine", {"task": "t", "draft": ORIGINAL, "agent": "coder"})
    assert response.status_code in (200, 202) and waits  # it polled the row (until its deadline, or done)
    assert api_views._waiters.acquire(blocking=False)  # and gave the slot back


def test_it_answers_202_at_once_when_every_wait_slot_is_taken(api, settings, monkeypatch, waits):
    settings.REFINE_API_WAIT = 60
    slots = threading.BoundedSemaphore(1)
    assert slots.acquire(blocking=False)  # another request of this process is waiting
    monkeypatch.setattr(api_views, "_waiters", slots)
    response = api.post("/api/v1/refine", {"task": "t", "draft": ORIGINAL, "agent": "coder"})
    run = RefineRun.objects.get()
    assert response.status_code == 202 and response["Location"].endswith(f"/api/v1/refine/{run.pk}")
    assert waits == []  # it did not hold the thread
