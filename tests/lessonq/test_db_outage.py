"""A real database outage at ingest: gunicorn whose DATABASE_URL points at a closed port. The trigger is
accepted into the WAL (202) by a token verified before the outage; the row appears once the database is
reachable again and the sweeper reconciles the WAL."""

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lessonq.models import Job, JobState
from lessonq.reconcile import sweep
from tests.support.processes import subprocess_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

DOWN = "postgresql://postgres@127.0.0.1:1/nowhere"


def _post(base: str, token: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        base + "/api/v1/reflexion/triggers",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_it_accepts_triggers_while_the_database_is_down(queue_dir, settings, agent_token, start_gunicorn):
    token = agent_token("harness", "ingest")
    env = subprocess_env(LESSONQ_BASE_DIR=str(queue_dir), LESSONBOARD_NODE=settings.NODE)
    healthy = start_gunicorn(env=env, workers=1)
    status, body = _post(healthy.url, token, {"task": "deploy", "error": "helm timed out", "agent": "a"})
    assert (status, body["status"]) == (202, "accepted")  # verified against the database, remembered

    down = start_gunicorn(env={**env, "DATABASE_URL": DOWN}, workers=1)
    status, body = _post(down.url, token, {"task": "migrate", "error": "lock timeout", "agent": "a"})
    assert (status, body["status"]) == (202, "accepted")
    job_id = body["job_id"]
    assert (Path(queue_dir) / "wal" / f"{job_id}.wal").exists()  # durable before the answer
    assert not Job.objects.filter(pk=job_id).exists()

    unknown = agent_token("never-used-before", "ingest")
    status, body = _post(down.url, unknown, {"task": "t", "error": "e"})
    assert status == 503 and "database is unavailable" in body["error"]

    sweep()  # the database is back for this process: WAL ⇄ rows reconciled
    job = Job.objects.get(pk=job_id)
    assert job.state in (JobState.PENDING, JobState.RUNNING) and job.task == "migrate"
