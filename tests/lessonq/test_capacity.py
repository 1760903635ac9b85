"""Capacity accounting: the database keeps each node's in-flight count (``NodeLoad``) exact through
every write path, and concurrent producers never dispatch past ``LESSONQ_CAPACITY``."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from lessonq.dispatch import in_flight
from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job, JobState

pytestmark = pytest.mark.django_db


def counted() -> int:
    return Job.objects.for_this_node().in_flight().count()


def accepted(task: str) -> str:
    return enqueue(LessonRequest(task=task, attempt="a", outcome="ERROR: x", trigger="error")).job_id


def test_it_keeps_the_in_flight_count_exact_through_every_transition(queue_dir: Path, fake_openai: Any) -> None:
    ids = [accepted(f"job {i}") for i in range(6)]
    assert in_flight() == counted() == 6
    Job.objects.get(pk=ids[0]).mark_succeeded(None)
    Job.objects.get(pk=ids[1]).mark_dead("boom")
    Job.objects.get(pk=ids[2]).mark_waiting("operator paused it")
    assert in_flight() == counted() == 3
    Job.objects.filter(pk=ids[2]).update(dispatched_at=timezone.now())  # dispatched again, in bulk
    Job.objects.filter(pk__in=ids[3:5]).update(state=JobState.RETRY_WAIT)  # still in flight
    assert in_flight() == counted() == 4
    Job.objects.filter(pk__in=ids[4:]).delete()
    assert in_flight() == counted() == 2
    Job.objects.filter(pk__in=ids).update(node="lessonq.elsewhere")  # moved to another node
    assert in_flight() == counted() == 0


@pytest.mark.django_db(transaction=True)
def test_concurrent_producers_never_dispatch_past_capacity(queue_dir: Path, fake_openai: Any, settings: Any) -> None:
    settings.LESSONQ_CAPACITY = 5
    settings.LESSONQ_BLOCK_TIMEOUT = 0
    errors: list[BaseException] = []

    def produce(k: int) -> None:
        try:
            for i in range(4):
                accepted(f"producer {k} job {i}")
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert Job.objects.count() == 24
    assert counted() == in_flight() == 5
    assert Job.objects.filter(dispatched_at__isnull=True, waiting_reason__contains="queue full").count() == 19
