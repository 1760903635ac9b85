"""The embedded broker under a flood: several producer processes publish at once while two real Celery
workers consume. kombu's filesystem transport let a consumer claim a message file before its producer had
written it (JSONDecodeError, the worker's consumer stops, the message is lost); the embedded broker
(lessonboard/broker.py) publishes by rename. bench/bench_broker.py runs the same flood at full size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.broker_flood import recorded
from tests.support.processes import ROOT, CeleryWorker, purge_broker, subprocess_env
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

PRODUCERS = 4
MESSAGES = 3000


def test_it_delivers_every_message_of_a_flood_from_several_producers_without_a_decode_error(tmp_path: Path) -> None:
    if not settings.EMBEDDED_BROKER:
        pytest.skip(f"this flood is for the embedded broker; CELERY_BROKER_URL is {settings.CELERY_BROKER_URL}")
    purge_broker()
    env = subprocess_env(LB_FLOOD_OUT=str(tmp_path))
    workers = [
        CeleryWorker(
            queues=["default"], hostname=f"flood{n}@%h", env=env, extra=["--include", "tests.support.broker_flood"]
        ).wait_ready()
        for n in range(2)
    ]
    try:
        producers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    f"from tests.support.broker_flood import publish; publish(range({n}, {MESSAGES}, {PRODUCERS}))",
                ],
                env=env,
                cwd=ROOT,
            )
            for n in range(PRODUCERS)
        ]
        assert [p.wait(timeout=300) for p in producers] == [0] * PRODUCERS

        def all_run() -> bool:
            assert all(w.alive() for w in workers), "a worker died:\n" + "\n".join(w.log()[-3000:] for w in workers)
            return len(recorded(tmp_path)) >= MESSAGES

        wait_for(all_run, timeout=600, interval=0.5, what=f"{MESSAGES} messages run")
        numbers = recorded(tmp_path)
        logs = "".join(w.log() for w in workers)
    finally:
        for worker in workers:
            worker.stop()

    assert sorted(numbers) == list(range(MESSAGES))  # none lost, none twice
    assert "JSONDecodeError" not in logs and "Unrecoverable error" not in logs
    bad = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]) / ".bad"
    assert not bad.exists() or not list(bad.iterdir())
