"""Poison isolation: one record that cannot be handled never blocks the others; NUL in WAL-bound text is
kept in the WAL and stored visibly replaced in the row (docs/api.md#input-policy,
docs/operations.md#poison-records)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from lessonboard.models import AuditEvent
from lessonq import dlq as dlq_ops
from lessonq import reconcile
from lessonq.ingest import LessonRequest
from lessonq.metrics import POISON_RECORDS
from lessonq.models import Job, JobState
from lessonq.paths import dlq, wal
from lessonq.wal import REASON_SUFFIX, frame
from tests.support.queue import record

pytestmark = pytest.mark.django_db
URL = "/api/v1/reflexion/triggers"


def poison_count() -> float:
    return float(POISON_RECORDS._value.get())  # type: ignore[attr-defined]


def test_it_accepts_a_nul_trigger_keeping_the_exact_text_in_the_wal(api: Any, queue_dir: Path) -> None:
    response = api.post(URL, raw='{"task":"a\\u0000b","error":"x\\u0000y"}')
    assert response.status_code == 202, response.content
    job_id = response.json()["job_id"]
    assert job_id == LessonRequest(task="a\x00b", attempt="", outcome="ERROR: x\x00y", trigger="error").job_id
    wal_record = wal().read(job_id)
    assert wal_record is not None and (wal_record.task, wal_record.outcome) == ("a\x00b", "ERROR: x\x00y")
    job = Job.objects.get(pk=job_id)  # the row exists at once: no sweeper needed
    assert (job.task, job.outcome) == ("a\ufffdb", "ERROR: x\ufffdy")
    assert reconcile.sweep().quarantined == 0


def test_it_refuses_a_nul_in_the_agent_name_naming_the_field(api: Any, queue_dir: Path) -> None:
    response = api.post(URL, raw='{"task":"t","error":"x","agent":"a\\u0000"}')
    assert response.status_code == 400
    assert response.json()["field"] == "agent"
    assert wal().count() == 0


def test_it_adopts_a_wal_record_with_nul_and_lone_surrogates(queue_dir: Path) -> None:
    """A record written by chatcli (or an older lessonboard) with text PostgreSQL cannot store."""
    wal().append(record("00000000000000a1", task="nul\x00here", last_error="bad \ud800 text"))
    wal().append(record("00000000000000a2"))
    report = reconcile.replay()
    assert report.adopted == 2 and report.quarantined == 0
    job = Job.objects.get(pk="00000000000000a1")
    assert (job.task, job.last_error) == ("nul\ufffdhere", "bad \ufffd text")
    read = wal().read("00000000000000a1")
    assert read is not None and read.task == "nul\x00here"  # the WAL keeps the exact text


def test_it_quarantines_a_record_the_database_refuses_and_adopts_the_others(queue_dir: Path) -> None:
    before = poison_count()
    good = [record(f"00000000000000b{n}") for n in range(3)]
    poison = record("00000000000000bf", attempts=10**12)  # beyond the attempts column: refused by PostgreSQL
    for r in (*good, poison):
        wal().append(r)
    report = reconcile.sweep()
    assert set(Job.objects.values_list("pk", flat=True)) == {r.id for r in good}
    assert report.adopted == 3 and report.quarantined == 1
    assert not wal().exists(poison.id)
    moved = queue_dir / "quarantine" / f"wal-{poison.id}.wal"
    assert moved.read_bytes() == frame(poison.payload())  # kept byte for byte
    reason = (queue_dir / "quarantine" / f"wal-{poison.id}.wal{REASON_SUFFIX}").read_text()
    assert "integer out of range" in reason or "out of range" in reason
    assert poison_count() == before + 1
    assert reconcile.sweep().quarantined == 0  # nothing left to block the next pass


def test_a_lost_connection_during_an_adoption_copy_is_an_outage_not_a_poison_record(
    queue_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The adoption COPY runs on psycopg's own cursor: its connection error is psycopg's, not Django's, and
    must stop the pass like any outage instead of quarantining the record it was adopting."""
    import psycopg

    one = record("00000000000000c1")
    wal().append(one)

    def connection_lost(*args: Any, **kwargs: Any) -> int:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(reconcile, "adopt_records", connection_lost)
    with pytest.raises(psycopg.OperationalError):
        reconcile.sweep()
    assert wal().exists(one.id)
    assert not list((queue_dir / "quarantine").glob("*"))
    monkeypatch.undo()
    assert reconcile.sweep().adopted == 1


def test_reflect_drain_succeeds_past_a_poison_record(queue_dir: Path, fake_openai: Any) -> None:
    wal().append(record("00000000000000c1", trigger="x" * 50))  # longer than the trigger column
    wal().append(record("00000000000000c2"))
    out = StringIO()
    call_command("reflect", "drain", stdout=out)
    assert "drain complete" in out.getvalue()
    assert list(Job.objects.values_list("pk", flat=True)) == ["00000000000000c2"]
    assert (queue_dir / "quarantine" / "wal-00000000000000c1.wal").exists()


def test_it_quarantines_a_poison_dlq_record_and_adopts_the_other_dead_jobs(queue_dir: Path) -> None:
    dlq().append(record("00000000000000d1", attempts=10**12, last_error="boom"))
    dlq().append(record("00000000000000d2", attempts=5, last_error="boom"))
    report = reconcile.sweep()
    assert list(Job.objects.values_list("pk", "state")) == [("00000000000000d2", JobState.DEAD)]
    assert report.quarantined == 1
    assert (queue_dir / "quarantine" / "dlq-00000000000000d1.wal").exists()


def test_the_queue_page_lists_quarantined_records_with_their_reason(
    client_as: Any, carol: Any, queue_dir: Path
) -> None:
    wal().append(record("00000000000000e1", attempts=10**12))
    reconcile.sweep()
    page = client_as(carol).get("/queue/").content.decode()
    assert 'id="quarantine"' in page
    assert "wal-00000000000000e1.wal" in page
    assert "out of range" in page


def test_chatcli_import_adopts_the_others_when_one_record_cannot_be_adopted(tmp_path: Path, queue_dir: Path) -> None:
    src = tmp_path / "reflexion"
    (src / "wal").mkdir(parents=True)
    for r in (record("00000000000000f1", attempts=10**12), record("00000000000000f2", task="nul\x00")):
        (src / "wal" / f"{r.id}.wal").write_bytes(frame(r.payload()))
    out = StringIO()
    call_command("lessonq", "import", str(src), stdout=out)
    assert list(Job.objects.values_list("pk", "task")) == [("00000000000000f2", "nul\ufffd")]
    assert "1 corrupt record(s) quarantined" in out.getvalue()
    assert (queue_dir / "quarantine" / f"import-wal-00000000000000f1.wal{REASON_SUFFIX}").exists()
    assert not wal().exists("00000000000000f1")


def dead_job(job_id: str = "00000000000000aa") -> Job:
    dlq().append(record(job_id, attempts=5, last_error="boom"))
    reconcile.sweep()
    return Job.objects.get(pk=job_id)


def test_a_nul_in_an_operators_reason_is_refused_before_the_retry(client_as: Any, alice: Any, queue_dir: Path) -> None:
    job = dead_job()
    before = AuditEvent.objects.count()
    response = client_as(alice).post(f"/queue/jobs/{job.pk}/retry", {"reason": "because\x00"})
    assert response.status_code == 400
    assert "reason" in response.content.decode()
    job.refresh_from_db()
    assert job.state == JobState.DEAD and dlq().exists(job.pk)
    assert AuditEvent.objects.count() == before
    with pytest.raises(dlq_ops.DLQError, match="NUL"):
        dlq_ops.retry(job.pk, reason="x\x00")
    job.refresh_from_db()
    assert job.state == JobState.DEAD


def test_a_retry_and_its_audit_event_commit_together(
    client_as: Any, alice: Any, queue_dir: Path, monkeypatch: Any
) -> None:
    job = dead_job()

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("audit store refused")

    monkeypatch.setattr(dlq_ops, "_audit", refuse)
    with pytest.raises(RuntimeError):
        dlq_ops.retry(job.pk, reason="ok")
    job.refresh_from_db()
    assert job.state == JobState.DEAD  # no retry without its audit event
    assert dlq().exists(job.pk)


def test_a_retry_after_a_transient_failure_keeps_the_exact_wal_text(queue_dir: Path, fake_openai: Any) -> None:
    from lessonq import processing
    from lessonq.models import JobAttempt

    wal().append(record("00000000000000ab", task="keep\x00me"))
    reconcile.sweep()
    job = Job.objects.get(pk="00000000000000ab")
    assert job.claim(timeout=5, now=timezone.now() + timedelta(seconds=1))
    attempt = JobAttempt.objects.create(job=job, number=job.attempts, started_at=timezone.now())
    processing.retry_or_dead(job, attempt, "LLM said \x00 no")
    after = wal().read(job.pk)
    assert after is not None and after.task == "keep\x00me" and after.last_error == "LLM said \x00 no"
    job.refresh_from_db()
    assert (job.state, job.last_error) == (JobState.RETRY_WAIT, "LLM said \ufffd no")


def test_reflect_refuses_a_manual_lesson_with_a_nul(queue_dir: Path) -> None:
    from django.core.management.base import CommandError

    from lessons.models import Lesson

    with pytest.raises(CommandError, match="NUL"):
        call_command("reflect", "use\x00Edit", stdout=StringIO())
    assert not Lesson.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_nul_trigger_through_gunicorn_then_reflect_drain_in_its_own_process(
    queue_dir: Path, settings: Any, agent_token: Any, start_gunicorn: Any
) -> None:
    """The reported sequence end to end: the trigger through a real gunicorn, then ``manage.py reflect
    drain`` as an operator runs it."""
    import json
    import subprocess
    import sys
    import urllib.request

    from tests.support.processes import subprocess_env

    env = subprocess_env(LESSONQ_BASE_DIR=str(queue_dir), LESSONBOARD_NODE=settings.NODE)
    server = start_gunicorn(env=env, workers=1)
    request = urllib.request.Request(
        server.url + URL,
        data=b'{"task":"a\\u0000b","error":"x"}',
        headers={"Authorization": f"Bearer {agent_token('harness', 'ingest')}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 202
        job_id = json.loads(response.read())["job_id"]
    wal().append(record("00000000000000c2"))  # another record that must not be blocked
    drain = subprocess.run(
        [sys.executable, "manage.py", "reflect", "drain"], env=env, capture_output=True, text=True, timeout=120
    )
    assert drain.returncode == 0, drain.stderr[-2000:]
    assert "drain complete" in drain.stdout
    assert Job.objects.get(pk=job_id).task == "a\ufffdb"
    assert Job.objects.filter(pk="00000000000000c2").exists()


def test_a_poison_record_among_more_than_a_batch_is_quarantined_and_the_others_adopted(queue_dir: Path) -> None:
    """Records without rows are adopted by COPYs of up to ADOPT_BATCH: a failing COPY is redone in parts."""
    good = [record(f"{n:016x}") for n in range(reconcile.BATCH + 100)]
    poison = record("00000000000fffff", attempts=10**12)  # beyond the attempts column: refused by PostgreSQL
    for r in (*good, poison):
        (wal().dir / f"{r.id}.wal").write_bytes(frame(r.payload()))  # no fsync: set-up only
    report = reconcile.replay()
    assert report.adopted == len(good) and report.quarantined == 1
    assert Job.objects.count() == len(good) and not Job.objects.filter(pk=poison.id).exists()
    assert (queue_dir / "quarantine" / f"wal-{poison.id}.wal").exists()
