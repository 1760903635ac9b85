"""An LLM outage through real workers and beat (docs/operations.md#llm-outage): the fake LLM stops, 50
triggers arrive, the breaker opens and no job dies; the fake comes back, a probe closes the breaker and
every job succeeds."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Sum

from lessonboard.models import BreakerState, LLMBreaker
from lessonq.models import Job, JobState
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.support.processes import CeleryWorker, ManagedProcess, subprocess_env
from tests.support.queue import LESSON
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

JOBS = 50
THRESHOLD = 3


@pytest.fixture
def own_llm(settings: Any) -> Iterator[FakeOpenAIServer]:
    """A fake LLM of this test's own (the session's one must keep running for other tests)."""
    server = FakeOpenAIServer().start()
    server.responder = lambda payload: Reply(text=LESSON.replace("edit large file", _task_of(payload)))
    settings.LLM_BASE_URL, settings.LLM_MODEL, settings.LLM_TIMEOUT = server.url, server.model, 5.0
    settings.LLM_BREAKER_THRESHOLD = THRESHOLD
    yield server
    server.stop()


def _task_of(payload: dict[str, Any]) -> str:
    user = payload["messages"][-1]["content"]
    return str(user.split("\n", 2)[1]) if "\n" in user else "probe"


def _worker_and_beat(
    start_worker: Callable[..., CeleryWorker], settings: Any, queue_dir: Path, tmp_path: Path
) -> tuple[CeleryWorker, ManagedProcess]:
    node = settings.NODE
    env = subprocess_env(
        LESSONQ_BASE_DIR=str(queue_dir),
        LESSONBOARD_NODE=node,
        LESSONBOARD_LLM_BASE_URL=settings.LLM_BASE_URL,
        LESSONBOARD_LLM_MODEL=settings.LLM_MODEL,
        LESSONBOARD_LLM_TIMEOUT="5s",
        LESSONQ_INITIAL_DELAY="50ms",
        LESSONQ_JITTER="0",
        LESSONQ_REDISPATCH_AFTER="1s",
        LESSONQ_SWEEP_INTERVAL="500ms",
        LESSONQ_CAPACITY="1000",
        LESSONBOARD_LLM_BREAKER_THRESHOLD=str(THRESHOLD),
        LESSONBOARD_LLM_BREAKER_PROBE_INTERVAL="500ms",
        LESSONBOARD_LLM_BREAKER_PROBE_TIMEOUT="2s",
    )
    worker = start_worker(queues=[f"lessonq.{node}", "default", "llm"], env=env, concurrency=2, hostname=f"{node}@%h")
    # Beat in its own process, as `serve` runs it: it sends the sweeps and the breaker's probes.
    beat_cmd = [sys.executable, "-m", "celery", "-A", "lessonboard", "beat", "--loglevel", "INFO"]
    beat = ManagedProcess("beat", [*beat_cmd, "--schedule", str(tmp_path / "beat-schedule")], env)
    return worker, beat


def test_it_waits_out_an_llm_outage_without_spending_attempts_and_runs_every_job_after(
    queue_dir: Path,
    own_llm: FakeOpenAIServer,
    start_worker: Callable[..., CeleryWorker],
    settings: Any,
    tmp_path: Path,
    client: Any,
    client_as: Callable[[Any], Any],
    alice: Any,
    request: pytest.FixtureRequest,
    api: Any,
) -> None:
    settings.LESSONQ_CAPACITY = 1000
    port = own_llm.port
    own_llm.stop()
    worker, beat = _worker_and_beat(start_worker, settings, queue_dir, tmp_path)
    request.addfinalizer(beat.stop)
    ids = []
    for n in range(JOBS):  # 50 triggers through the API, as agents send them
        response = api.post("/api/v1/reflexion/triggers", {"task": f"outage task {n}", "output": "a", "error": "x"})
        assert response.status_code == 202
        ids.append(response.json()["job_id"])

    def every_job_waits_for_the_llm() -> bool:
        waiting = Job.objects.filter(
            pk__in=ids,
            state__in=[JobState.PENDING, JobState.RETRY_WAIT],
            dispatched_at__isnull=True,
            waiting_reason__startswith="LLM unreachable since",
        )
        return waiting.count() == JOBS

    wait_for(every_job_waits_for_the_llm, timeout=120, what="all 50 jobs parked behind the open breaker")
    breaker = LLMBreaker.objects.get(pk=settings.LLM_BASE_URL)
    assert breaker.state in (BreakerState.OPEN, BreakerState.HALF_OPEN) and breaker.trips == 1
    assert "cannot reach the LLM endpoint" in breaker.last_error
    # Once the breaker opened, no attempt was spent: at most the failures before it opened count.
    assert not Job.objects.filter(pk__in=ids, state=JobState.DEAD).exists()
    assert (Job.objects.filter(pk__in=ids).aggregate(n=Sum("attempts"))["n"] or 0) < THRESHOLD
    # Probes keep failing while it is down: the breaker stays open, still nothing dies.
    probes = breaker.probes
    wait_for(lambda: LLMBreaker.objects.get(pk=settings.LLM_BASE_URL).probes >= probes + 2, timeout=60, what="probes")
    assert not Job.objects.filter(pk__in=ids, state=JobState.DEAD).exists()

    # The outage shows: overview, queue banner, /readyz (degraded, still 200), /metrics.
    page = client_as(alice)
    overview = page.get("/").content.decode()
    assert 'id="llm-outage"' in overview and "LLM unreachable since" in overview
    assert "cannot reach the LLM endpoint" in overview
    queue = page.get("/queue/").content.decode()
    assert 'class="banner error" id="llm-outage"' in queue
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "degraded"
    assert ready.json()["checks"]["llm"]["detail"].startswith("degraded: LLM unreachable since")
    metrics = client.get("/metrics").content.decode()
    assert "lessonboard_llm_breaker_open 1.0" in metrics

    own_llm.start(port=port)  # the LLM comes back on the same address
    wait_for(
        lambda: Job.objects.filter(pk__in=ids, state=JobState.SUCCEEDED).count() == JOBS,
        timeout=180,
        what="all 50 jobs succeeded after the LLM came back",
    )
    breaker.refresh_from_db()
    assert breaker.state == BreakerState.CLOSED and breaker.failures == 0 and breaker.closed_at is not None
    assert not Job.objects.filter(pk__in=ids, lesson__isnull=True).exists()
    assert client.get("/readyz").json()["status"] == "ready"
    assert worker.alive()
    assert 'id="llm-outage"' not in page.get("/queue/").content.decode()
