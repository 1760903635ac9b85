"""The ingest hot path: after the token lookup, one statement (one implicit transaction, one commit)
inserts the row, decides its dispatch and owes its message in the outbox; the node's dispatcher sends it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from lessonboard import llm
from lessonboard.models import BreakerState, LLMBreaker
from lessonq.dispatch import in_flight
from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job, Outbox
from lessonq.outbox import drain
from tests.support.processes import ROOT, subprocess_env
from tests.support.wait import wait_for

URL = "/api/v1/reflexion/triggers"


def trigger(task: str) -> LessonRequest:
    return LessonRequest(task=task, attempt="a", outcome="ERROR: x", trigger="error")


@pytest.mark.django_db(transaction=True)
def test_a_trigger_is_the_token_lookup_and_one_statement(api: Any, queue_dir: Path, fake_openai: Any) -> None:
    api.post(URL, {"task": "first", "error": "e"})  # the token's first use records it (once per interval)
    with CaptureQueriesContext(connection) as queries:
        response = api.post(URL, {"task": "second", "error": "e"})
    assert response.status_code == 202
    statements = [q["sql"] for q in queries.captured_queries]
    assert len(statements) == 2, statements
    assert "lessonboard_agenttoken" in statements[0]
    insert = statements[1]
    # One execute: its statements run in one implicit transaction, committed once, with no COUNT.
    assert "INSERT INTO queue_job" in insert and "count(" not in insert.lower()
    assert not any(s.strip().upper() in ("BEGIN", "COMMIT") or s.startswith("SAVEPOINT") for s in statements)
    job = Job.objects.get(pk=response.json()["job_id"])
    assert job.dispatched_at is not None and job.waiting_reason == ""
    assert in_flight() == 2
    # Both messages are owed, not sent: the web process did no broker work. The dispatcher sends them.
    owed = set(Outbox.objects.values_list("job_id", flat=True))
    assert owed == set(Job.objects.values_list("id", flat=True)) and len(owed) == 2
    assert drain() == 2
    assert not Outbox.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_token_lookup_checks_the_kept_connection(api: Any, queue_dir: Path, fake_openai: Any) -> None:
    """The token lookup is also the request's connection check (no ``SELECT 1`` round trip first): a
    connection the database dropped since the last request is replaced and the trigger is recorded
    as usual, not only put in the WAL as during an outage."""
    assert api.post(URL, {"task": "first", "error": "e"}).status_code == 202
    other = connections.create_connection("default")
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [connection.connection.info.backend_pid])
        assert cursor.fetchone() == (True,)
    other.close()
    connection.close_if_unusable_or_obsolete()  # what Django does when the next request starts
    response = api.post(URL, {"task": "second", "error": "e"})
    assert response.status_code == 202
    assert Job.objects.filter(pk=response.json()["job_id"]).exists()


@pytest.mark.django_db
def test_an_open_breaker_defers_a_new_job_with_the_outage_text(queue_dir: Path, fake_openai: Any) -> None:
    LLMBreaker.objects.create(
        endpoint=fake_openai.url, state=BreakerState.OPEN, opened_at=timezone.now(), last_error="connection refused"
    )
    result = enqueue(trigger("while the LLM is down"))
    job = Job.objects.get(pk=result.job_id)
    assert not result.dispatched and job.dispatched_at is None
    assert job.waiting_reason.startswith("LLM unreachable since") and "connection refused" in job.waiting_reason
    assert in_flight() == 0
    assert not Outbox.objects.exists()  # no message is owed for a deferred job


@pytest.mark.django_db
def test_without_an_llm_a_new_job_waits_saying_so(queue_dir: Path, settings: Any) -> None:
    settings.LLM_BASE_URL = ""
    result = enqueue(trigger("no llm configured"))
    job = Job.objects.get(pk=result.job_id)
    assert job.dispatched_at is None and job.waiting_reason == llm.status_text()
    assert in_flight() == 0


PRODUCER = """
import django; django.setup()
from lessonq.ingest import LessonRequest, enqueue
for i in range({per}):
    enqueue(LessonRequest(task=f"process {{__import__('os').getpid()}} job {{i}}", attempt="a", outcome="ERROR: x",
                          trigger="error"))
"""


@pytest.mark.django_db(transaction=True)
def test_concurrent_producer_processes_never_dispatch_past_capacity(
    queue_dir: Path, fake_openai: Any, settings: Any
) -> None:
    env = subprocess_env(
        LESSONQ_BASE_DIR=str(queue_dir),
        LESSONBOARD_NODE=settings.NODE,
        LESSONBOARD_LLM_BASE_URL=fake_openai.url,
        LESSONBOARD_LLM_MODEL=fake_openai.model,
        LESSONQ_CAPACITY="7",
        LESSONQ_BLOCK_TIMEOUT="0",
        DJANGO_SETTINGS_MODULE="lessonboard.settings",
    )
    producers = [
        subprocess.Popen([sys.executable, "-c", PRODUCER.format(per=6)], cwd=ROOT, env=env, stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    for proc in producers:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    assert Job.objects.for_this_node().count() == 24
    assert Job.objects.for_this_node().in_flight().count() == in_flight() == 7
    assert (
        Job.objects.for_this_node().filter(dispatched_at__isnull=True, waiting_reason__contains="queue full").count()
        == 17
    )
    # Exactly the admitted jobs owe a message.
    assert set(Outbox.objects.values_list("job_id", flat=True)) == set(
        Job.objects.for_this_node().in_flight().values_list("id", flat=True)
    )


DISPATCHER = """
import django; django.setup()
from lessonq.models import Outbox
from lessonq.outbox import Dispatcher
dispatcher = Dispatcher()
dispatcher.start()
while Outbox.objects.exists():  # until the broker took everything it was owed
    dispatcher.stopping.wait(0.05)
dispatcher.stopping.set()
dispatcher.join()
print("outbox empty", flush=True)
"""


@pytest.mark.django_db(transaction=True)
def test_the_dispatcher_keeps_what_it_owes_while_the_broker_is_down_and_sends_it_when_it_is_back(
    queue_dir: Path, fake_openai: Any, settings: Any, tmp_path: Path
) -> None:
    """A broker that refuses messages costs nothing owed: the dispatcher logs, backs off and retries,
    and the entry stays until a send succeeds. The dispatcher runs in a process of its own on an
    embedded broker in a folder of its own, broken by a file where its staging folder belongs."""
    job_id = enqueue(trigger("owed while the broker is down")).job_id
    assert Outbox.objects.filter(job_id=job_id).exists()
    data = tmp_path / "data"
    queue = data / "broker" / "queue"
    queue.mkdir(parents=True)
    (queue / ".staging").write_text("not a folder: every publish fails")
    log = tmp_path / "dispatcher.log"
    env = subprocess_env(
        LESSONBOARD_DATA_DIR=str(data), CELERY_BROKER_URL="atomicfs://", LESSONBOARD_NODE=settings.NODE
    )
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", DISPATCHER], cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        wait_for(
            lambda: log.read_text().count("sending owed messages failed (retrying)") >= 2,
            timeout=60,
            what="the dispatcher failing and retrying",
        )
        assert Outbox.objects.filter(job_id=job_id).exists()  # kept while nothing could be sent
        assert not [p for p in queue.iterdir() if p.name.endswith(".msg")]
        (queue / ".staging").unlink()  # the broker is back
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "outbox empty" in log.read_text()
    sent = [p for p in queue.iterdir() if p.name.endswith(".msg")]
    assert len(sent) == 1 and job_id in sent[0].read_text()
    assert not Outbox.objects.exists()


def test_the_dispatcher_outlives_a_long_outage(db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its wait doubles up to a cap after each failure; past 1,024 failures in a row (~85 minutes at the
    cap) the doubling overflowed a float and the thread died, leaving the outbox to the sweeper alone."""
    from lessonq import outbox

    dispatcher = outbox.Dispatcher()
    failures = 0
    waits: list[float] = []

    def broker_down(limit: int = outbox.BATCH) -> int:
        nonlocal failures
        failures += 1
        if failures > 1100:
            dispatcher.stopping.set()
        raise ConnectionError("broker down")

    monkeypatch.setattr(outbox, "drain_once", broker_down)
    monkeypatch.setattr(dispatcher.stopping, "wait", lambda seconds: waits.append(seconds))
    dispatcher.run()  # returns once stopping is set, instead of raising OverflowError at the 1,024th failure
    assert failures == 1101 and len(waits) == 1101
    assert waits[0] == outbox.IDLE_WAIT * 2 and max(waits) == waits[-1] == outbox.ERROR_WAIT_MAX
