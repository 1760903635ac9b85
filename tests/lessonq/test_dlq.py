"""DLQ domain functions (docs/compat/chatcli.md#dlq, docs/compat/chatcli.md#dlq-retry) and the ``reflect`` command (docs/compat/chatcli.md#reflect-command)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from lessonboard.models import AuditEvent
from lessonq import dlq, processing
from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job, JobState
from lessonq.paths import dlq as dlq_dir
from lessonq.paths import wal
from lessons.models import Lesson
from tests.fakes.openai_server import Reply

pytestmark = pytest.mark.django_db


def dead_job(fake_openai: Any, task: str = "t") -> str:
    fake_openai.script(Reply(text="garbage"))
    job_id = enqueue(LessonRequest(task=task, attempt="a", outcome="ERROR: x", trigger="error")).job_id
    processing.process(job_id)
    assert Job.objects.get(pk=job_id).state == JobState.DEAD
    return job_id


def reflect(*args: str) -> str:
    out = StringIO()
    call_command("reflect", *args, stdout=out)
    return out.getvalue()


def test_retry_resets_attempts_keeps_enqueued_at_and_moves_the_record(queue_dir: Path, fake_openai: Any) -> None:
    job_id = dead_job(fake_openai)
    enqueued = Job.objects.get(pk=job_id).enqueued_at
    dlq.retry(job_id)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.attempts, job.last_error, job.enqueued_at) == (JobState.PENDING, 0, "", enqueued)
    record = wal().read(job_id)
    assert record is not None and (record.attempts, record.last_error) == (0, "")
    assert not dlq_dir().exists(job_id)
    assert AuditEvent.objects.filter(action="queue.dlq_retry", object_ids=[job_id]).exists()
    fake_openai.script(Reply(text="<situation>s</situation><correction>c</correction>"))
    assert processing.process(job_id) == "success"


def test_a_retried_old_dead_job_waits_through_sweeps_and_expires_only_at_the_next_replay(
    queue_dir: Path, settings: Any
) -> None:
    """chatcli keeps a retried job's EnqueuedAt so that an old one may be discarded at the next replay; the
    30-second sweep is no replay: a job an operator retried while it cannot run yet (no LLM here) waits."""
    from datetime import timedelta

    from django.utils import timezone

    from lessonq import reconcile
    from tests.support.queue import make_job

    settings.LLM_BASE_URL = ""  # no LLM: the retried job waits
    job = make_job(state=JobState.DEAD, enqueued_at=timezone.now() - timedelta(days=8))
    dlq.retry(job.id)
    reconcile.sweep()
    reconcile.sweep()
    assert Job.objects.get(pk=job.id).state == JobState.PENDING and wal().exists(job.id)
    assert reconcile.replay().expired == 1  # the boot drain's rule, as chatcli's
    assert Job.objects.get(pk=job.id).state == JobState.EXPIRED and not wal().exists(job.id)


def test_retry_of_an_unknown_id_fails_with_chatclis_message(queue_dir: Path) -> None:
    with pytest.raises(dlq.DLQError, match="lessonq runner: dlq entry 0123456789abcdef not found"):
        dlq.retry("0123456789abcdef")
    with pytest.raises(dlq.DLQError, match="invalid job id"):
        dlq.retry("../../etc/passwd")


def test_purge_removes_the_record_and_unknown_ids_succeed(queue_dir: Path, fake_openai: Any) -> None:
    job_id = dead_job(fake_openai)
    dlq.purge(job_id)
    assert Job.objects.get(pk=job_id).state == JobState.PURGED and not dlq_dir().exists(job_id)
    dlq.purge("0123456789abcdef")


def test_bulk_forms_report_each_id(queue_dir: Path, fake_openai: Any) -> None:
    a, b = dead_job(fake_openai, "a"), dead_job(fake_openai, "b")
    result = dlq.retry_many([a, "ffffffffffffffff"])
    assert result.done == [a] and list(result.failed) == ["ffffffffffffffff"]
    result = dlq.purge_matching(Job.objects.all())
    assert result.done == [b] and Job.objects.get(pk=b).state == JobState.PURGED


def test_retry_many_moves_every_record_back_in_one_batch_within_capacity(
    queue_dir: Path, fake_openai: Any, settings: Any
) -> None:
    ids = [dead_job(fake_openai, f"batch {i}") for i in range(4)]
    dlq_dir().ack(ids[3])  # its DLQ record is gone: reported, not retried, the others unaffected
    settings.LESSONQ_CAPACITY = 2
    result = dlq.retry_many([*ids, ids[0]])
    assert result.done == ids[:3] and list(result.failed) == [ids[3]]
    jobs = Job.objects.in_bulk(ids)
    assert [jobs[i].state for i in ids] == [JobState.PENDING] * 3 + [JobState.DEAD]
    assert all(jobs[i].attempts == 0 and jobs[i].last_error == "" for i in ids[:3])
    assert sum(jobs[i].dispatched_at is not None for i in ids[:3]) == 2  # capacity 2: the third waits
    for i in ids[:3]:
        record = wal().read(i)
        assert record is not None and (record.attempts, record.last_error) == (0, "") and not dlq_dir().exists(i)
    (event,) = AuditEvent.objects.filter(action="queue.dlq_retry")
    assert sorted(event.object_ids) == sorted(ids[:3])


def test_reflect_status_list_and_failed(queue_dir: Path, fake_openai: Any) -> None:
    dead = dead_job(fake_openai, "broken task")
    enqueue(LessonRequest(task="waiting task", attempt="a", outcome="o", trigger="manual"))
    assert reflect() == (
        "  reflexion queue: 1 pending\n  reflexion DLQ: 1 entries\n"
        "  subcommands: /reflect list | failed | retry <id> | purge <id> | drain\n"
    )
    listing = reflect("list")
    assert "  pending (1):" in listing and "[trigger=manual  attempts=0  age=0s]" in listing
    assert f"    {dead}  [trigger=error  attempts=1]" in listing
    assert "      last error: lesson parser: no recognized blocks in response" in listing
    failed = reflect("failed")
    assert "  dead letter queue (1):" in failed and "      task: broken task" in failed
    data = json.loads(reflect("failed", "--json"))
    assert [j["id"] for j in data["dlq"]] == [dead]


def test_reflect_retry_purge_and_usage(queue_dir: Path, fake_openai: Any) -> None:
    job_id = dead_job(fake_openai)
    assert reflect("retry", job_id) == f"  job {job_id} re-queued\n"
    with pytest.raises(CommandError, match="retry failed: lessonq runner: dlq entry"):
        reflect("retry", job_id)
    with pytest.raises(CommandError, match=r"usage: /reflect retry <job-id>"):
        reflect("retry")
    assert reflect("purge", "0123456789abcdef") == "  job 0123456789abcdef purged from DLQ\n"
    assert reflect("PURGE", "0123456789abcdef", "--json") == '{"job_id": "0123456789abcdef", "status": "purged"}\n'


def test_reflect_failed_on_an_empty_dlq(queue_dir: Path) -> None:
    assert reflect("failed") == "  DLQ is empty — no failed lessons to review\n"


def test_reflect_drain_replays(queue_dir: Path, fake_openai: Any) -> None:
    job_id = enqueue(LessonRequest(task="t", attempt="a", outcome="o", trigger="error")).job_id
    Job.objects.filter(pk=job_id).delete()
    assert reflect("drain") == "  drain complete — 1 job(s) re-enqueued from WAL\n"
    assert Job.objects.filter(pk=job_id).exists()


def test_reflect_free_text_persists_a_manual_lesson(queue_dir: Path) -> None:
    assert reflect("when", "editing", "large", "Go", "files", "use", "Edit") == (
        "  lesson persisted to long-term memory (category=lesson)\n"
    )
    lesson = Lesson.objects.get()
    assert lesson.tags == ["reflexion", "trigger:manual", "user-supplied"]
    assert lesson.content == (
        "LESSON: when editing large Go files use Edit\n"
        "MISTAKE: (user-supplied lesson; no automatic mistake detection)\n"
        "CORRECTION: when editing large Go files use Edit\nTRIGGER: manual"
    )


def test_the_cli_exits_non_zero_on_failure(queue_dir: Path) -> None:
    import subprocess
    import sys

    from tests.support.processes import ROOT, subprocess_env

    proc = subprocess.run(
        [sys.executable, "manage.py", "reflect", "retry", "0123456789abcdef"],
        cwd=ROOT,
        env=subprocess_env(LESSONQ_BASE_DIR=str(queue_dir)),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "retry failed: lessonq runner: dlq entry 0123456789abcdef not found" in proc.stderr


def test_reflect_failures_print_chatclis_line_without_a_django_prefix(queue_dir: Path) -> None:
    import subprocess
    import sys

    from tests.support.processes import ROOT, subprocess_env

    env = subprocess_env(LESSONQ_BASE_DIR=str(queue_dir))
    done = subprocess.run(
        [sys.executable, "manage.py", "reflect", "retry", "0123456789abcdef"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "  ⚠  retry failed: lessonq runner: dlq entry 0123456789abcdef not found"
    assert "CommandError" not in done.stderr


def test_reflect_says_when_the_queue_is_disabled(queue_dir: Path, settings: Any) -> None:
    settings.LESSONQ_ENABLED = False
    assert reflect() == "  reflexion queue is disabled — enable via LESSONQ_ENABLED=true\n"
    with pytest.raises(CommandError, match="reflexion queue is disabled"):
        reflect("list")
    assert reflect("remember", "to", "pin", "versions") == "  lesson persisted to long-term memory (category=lesson)\n"
