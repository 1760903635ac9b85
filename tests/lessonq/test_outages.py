"""Disk full and broker down at ingest (docs/operations.md#disk-full, docs/operations.md#broker-down).

- The WAL on a full filesystem (a small tmpfs): 503, nothing half-written, and accepted again once there
  is room.
- The broker unreachable (gunicorn whose CELERY_BROKER_URL points at a closed port): ingest still answers
  202; once a broker is reachable the sweeper publishes the job and a real worker runs it.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lessonq.models import Job, JobState
from lessonq.reconcile import sweep
from tests.fakes.openai_server import Reply
from tests.support.processes import subprocess_env
from tests.support.queue import LESSON
from tests.support.wait import wait_for

URL = "/api/v1/reflexion/triggers"
CLOSED_BROKER = "redis://127.0.0.1:1/0"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs; skipped where mounting is not allowed (not root, no CAP_SYS_ADMIN)."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill up here ({done.stderr.strip() or done.returncode})")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(folder: Path, *, leave: int) -> Path:
    """Fill the filesystem of ``folder`` up to ``leave`` free bytes (tmpfs counts whole pages)."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    if leave:
        with filler.open("r+b") as out:
            out.truncate(max(filler.stat().st_size - leave, 0))
    return filler


def wal_files(base: Path) -> list[str]:
    return sorted(os.listdir(base / "wal")) + sorted(os.listdir(base / "dlq"))


@pytest.mark.django_db
def test_a_full_disk_answers_503_and_writes_nothing_half(api: Any, settings: Any, small_disk: Path) -> None:
    base = small_disk / "lessonq"
    for sub in ("wal", "dlq", "quarantine", "expired"):
        (base / sub).mkdir(parents=True)
    settings.LESSONQ_BASE_DIR = base
    filler = fill(small_disk, leave=16 * 1024)

    # A record larger than the room left: the write starts, fails with ENOSPC and the temp file goes.
    response = api.post(URL, {"task": "big", "output": "x" * 200_000, "error": "boom"})
    assert response.status_code == 503, response.content
    assert "cannot store the trigger" in response.json()["error"]
    assert wal_files(base) == []
    assert not Job.objects.exists()

    filler.unlink()
    fill(small_disk, leave=0)
    response = api.post(URL, {"task": "small", "error": "boom"})  # not even a page left
    assert response.status_code == 503
    assert wal_files(base) == []

    (small_disk / "filler").unlink()  # room again: accepted, whole
    response = api.post(URL, {"task": "small", "error": "boom"})
    assert response.status_code == 202
    job_id = response.json()["job_id"]
    assert wal_files(base) == [f"{job_id}.wal"]
    from lessonq.paths import wal

    record = wal().read(job_id)
    assert record is not None and record.task == "small"


def _post(base: str, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        base + URL,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_ingest_answers_202_while_the_broker_is_down_and_the_sweeper_dispatches_when_it_is_back(
    queue_dir: Path, settings: Any, agent_token: Any, start_gunicorn: Any, fake_openai: Any, lesson_worker: Any
) -> None:
    fake_openai.responder = lambda payload: Reply(text=LESSON)
    token = agent_token("harness", "ingest")
    env = subprocess_env(
        LESSONQ_BASE_DIR=str(queue_dir), LESSONBOARD_NODE=settings.NODE, CELERY_BROKER_URL=CLOSED_BROKER
    )
    no_broker = start_gunicorn(env=env, workers=1)
    task = f"deploy {uuid.uuid4().hex[:6]}"
    status, body = _post(no_broker.url, token, {"task": task, "error": "helm timed out"})
    assert (status, body["status"]) == (202, "accepted")
    job_id = body["job_id"]
    assert (queue_dir / "wal" / f"{job_id}.wal").exists()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.PENDING  # recorded; its message never reached a broker

    # The broker is back (this process and the worker use the suite's working broker).
    lesson_worker()

    def done() -> bool:
        sweep()  # re-publishes the job whose message was lost once LESSONQ_REDISPATCH_AFTER has passed
        return Job.objects.filter(pk=job_id, state=JobState.SUCCEEDED).exists()

    wait_for(done, timeout=90, interval=0.5, what="the job to run after the broker came back")
    assert not (queue_dir / "wal" / f"{job_id}.wal").exists()


@pytest.mark.django_db
def test_a_dlq_retry_on_a_full_disk_says_so_and_changes_nothing(
    client_as: Any, alice: Any, settings: Any, small_disk: Path
) -> None:
    from lessonboard.models import AuditEvent
    from lessonq.paths import dlq
    from tests.support.queue import record

    base = small_disk / "lessonq"
    for sub in ("wal", "dlq", "quarantine", "expired"):
        (base / sub).mkdir(parents=True)
    settings.LESSONQ_BASE_DIR = base
    dlq().append(record("00000000000000aa", attempts=5, last_error="boom"))
    sweep()
    fill(small_disk, leave=0)
    response = client_as(alice).post("/queue/jobs/00000000000000aa/retry", {"reason": "try again"}, follow=True)
    assert response.status_code == 200
    assert "No space left on device" in response.content.decode()
    assert Job.objects.get(pk="00000000000000aa").state == JobState.DEAD
    assert os.listdir(base / "wal") == [] and dlq().exists("00000000000000aa")
    assert not AuditEvent.objects.filter(action="queue.dlq_retry").exists()
