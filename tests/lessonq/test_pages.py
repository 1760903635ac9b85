"""What the queue adds to shared pages: Overview counts, the admin, beat's sweep fan-out."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job

pytestmark = pytest.mark.django_db


def test_the_overview_counts_jobs(client_as: Any, carol: Any, queue_dir: Path) -> None:
    enqueue(LessonRequest(task="t", attempt="a", outcome="ERROR: x", trigger="error"))
    Job.objects.create(
        id="00000000000000dd",
        node="x",
        state="dead",
        trigger="error",
        enqueued_at=Job.objects.get().enqueued_at,
        next_attempt_at=Job.objects.get().enqueued_at,
    )
    from lessonq.triage.queries import forget_counts

    forget_counts()
    page = client_as(carol).get("/").content.decode()
    assert "Lesson queue" in page
    for label, value in (("Pending jobs", 1), ("Retrying jobs", 0), ("Dead jobs (DLQ)", 1), ("Done jobs (recent)", 0)):
        assert re.search(rf'<dt><a href="/queue/\?tab=[a-z]+">{re.escape(label)}</a></dt><dd>{value}</dd>', page), label


def test_the_admin_lists_jobs_with_their_attempts(client_as: Any, admin_user: Any, queue_dir: Path) -> None:
    job_id = enqueue(LessonRequest(task="admin task", attempt="a", outcome="ERROR: x", trigger="error")).job_id
    client = client_as(admin_user)
    assert job_id in client.get("/admin/queue/job/?state=pending").content.decode()
    assert "admin task" in client.get(f"/admin/queue/job/{job_id}/change/").content.decode()
    assert client.get("/admin/queue/job/add/").status_code == 403


def test_beat_fans_the_sweep_out_to_every_known_node(queue_dir: Path, settings: Any) -> None:
    from lessonboard.models import WorkerHeartbeat
    from lessonq.reconcile import known_queues

    WorkerHeartbeat.objects.create(hostname="other:host", node="othernode")
    assert settings.CELERY_BEAT_SCHEDULE["lessonq-sweep"]["task"] == "lessonq.tasks.sweep_all"
    assert set(known_queues()) >= {settings.LESSONQ_QUEUE, "lessonq.othernode"}
