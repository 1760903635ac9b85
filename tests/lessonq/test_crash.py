"""Crash safety: kill -9 a worker child mid-job, and die (fault injection) at each step of the effect
orders in docs/architecture.md#order-of-effects. After restart the invariant holds, every accepted job ends in exactly one
terminal state, and no job produced two lessons."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lessonq import reconcile
from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import ACTIVE, Job, JobAttempt, JobState, Outbox
from lessonq.paths import dlq, expired_dir, wal
from lessons.models import Lesson
from tests.fakes.openai_server import Reply
from tests.support.processes import ROOT, subprocess_env
from tests.support.queue import LESSON
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]
TERMINAL = ("succeeded", "skipped", "dead", "purged", "expired")


def submit(task: str = "crash me") -> str:
    return enqueue(LessonRequest(task=task, attempt="a", outcome="ERROR: x", trigger="error")).job_id


def assert_invariant() -> None:
    """The invariant table (docs/architecture.md#invariant), for every job of this node."""
    for job in Job.objects.for_this_node():
        in_wal, in_dlq = wal().exists(job.pk), dlq().exists(job.pk)
        if job.state in ACTIVE:
            assert in_wal and not in_dlq, (job.pk, job.state, in_wal, in_dlq)
        elif job.state == JobState.DEAD:
            assert in_dlq and not in_wal, (job.pk, job.state, in_wal, in_dlq)
        elif job.state == JobState.EXPIRED:
            assert not in_wal and (expired_dir() / f"{job.pk}.wal").exists()
        else:
            assert not in_wal and not in_dlq, (job.pk, job.state, in_wal, in_dlq)
    for job_id in Lesson.objects.exclude(source_job_id=None).values_list("source_job_id", flat=True):
        assert Lesson.objects.filter(source_job_id=job_id).count() == 1


def settle(*ids: str, timeout: float = 60) -> None:
    """Run the sweeper (as beat would) until every job is terminal and its WAL record gone (the worker
    unlinks it just after the commit that made the job terminal, so the two are briefly apart)."""

    def done() -> bool:
        reconcile.sweep()
        terminal = Job.objects.filter(pk__in=ids, state__in=TERMINAL).count() == len(ids)
        return terminal and not any(wal().exists(job_id) for job_id in ids)

    try:
        wait_for(done, timeout=timeout, interval=0.3, what=f"jobs {ids} terminal")
    except AssertionError:
        rows = list(
            Job.objects.filter(pk__in=ids).values(
                "pk", "state", "attempts", "claimed_by", "last_error", "dispatched_at"
            )
        )
        raise AssertionError(f"jobs not terminal: {rows}") from None


def test_kill_9_mid_job_redelivers_and_counts_the_attempt(
    queue_dir: Path, fake_openai: Any, lesson_worker: Any
) -> None:
    fake_openai.script(Reply(delay=60, text=LESSON))
    fake_openai.default = Reply(text=LESSON)
    worker = lesson_worker()
    job_id = submit()
    wait_for(lambda: fake_openai.chat_requests(), timeout=30, what="the LLM call in flight")
    for pid in worker.child_pids():
        os.kill(pid, signal.SIGKILL)
    settle(job_id)
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.SUCCEEDED and job.attempts == 2
    assert [a.outcome for a in job.attempt_rows.all()] == ["lost", "success"]
    assert Lesson.objects.filter(source_job_id=job_id).count() == 1
    assert_invariant()


def test_a_poison_job_that_kills_its_worker_ends_dead(queue_dir: Path, fake_openai: Any, lesson_worker: Any) -> None:
    fake_openai.default = Reply(delay=60, text=LESSON)
    worker = lesson_worker(LESSONQ_MAX_ATTEMPTS="2")
    job_id = submit("poison")
    for n in (1, 2):
        wait_for(lambda n=n: len(fake_openai.chat_requests()) == n, timeout=30, what=f"attempt {n} calling the LLM")
        for pid in worker.child_pids():
            os.kill(pid, signal.SIGKILL)
    settle(job_id)
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.DEAD and "worker lost" in job.last_error
    assert [a.outcome for a in job.attempt_rows.all()] == ["lost", "lost"]
    assert_invariant()


PROCESS_POINTS = {
    "process.after_claim": ([Reply(text=LESSON)], "succeeded"),
    "success.after_commit": ([Reply(text=LESSON)], "succeeded"),
    "skipped.after_row": ([Reply(text="<skip>nothing actionable</skip>")], "skipped"),
    "transient.after_wal": ([Reply(status=503), Reply(text=LESSON)], "succeeded"),
    "transient.after_row": ([Reply(status=503), Reply(text=LESSON)], "succeeded"),
    "dead.after_dlq": ([Reply(text="no blocks")], "dead"),
    "dead.after_row": ([Reply(text="no blocks")], "dead"),
}


@pytest.mark.parametrize("point", list(PROCESS_POINTS))
def test_a_crash_at_each_processing_step_is_repaired(
    point: str, queue_dir: Path, fake_openai: Any, lesson_worker: Any, tmp_path: Path
) -> None:
    replies, expected = PROCESS_POINTS[point]
    fake_openai.script(*replies)
    fake_openai.default = replies[-1]
    once = tmp_path / "fault-fired"
    lesson_worker(LESSONQ_FAULT=point, LESSONQ_FAULT_ONCE=str(once))
    job_id = submit(point)
    wait_for(once.exists, timeout=30, what=f"fault {point} fired")
    settle(job_id)
    assert Job.objects.get(pk=job_id).state == expected
    assert Lesson.objects.filter(source_job_id=job_id).count() == (1 if expected == "succeeded" else 0)
    assert_invariant()


def run_dying(code: str, point: str, queue_dir: Path) -> subprocess.CompletedProcess[str]:
    env = subprocess_env(LESSONQ_BASE_DIR=str(queue_dir), LESSONQ_FAULT=point)
    from django.conf import settings

    env["LESSONBOARD_NODE"] = settings.NODE
    env["LESSONBOARD_LLM_BASE_URL"] = settings.LLM_BASE_URL
    env["LESSONBOARD_LLM_MODEL"] = settings.LLM_MODEL
    script = "import django; django.setup()\n" + code
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "lessonboard.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "point", ["wal.append.after_tmp", "ingest.after_wal", "ingest.after_row", "outbox.before_send"]
)
def test_a_crash_during_ingest_is_repaired(point: str, queue_dir: Path, fake_openai: Any, lesson_worker: Any) -> None:
    fake_openai.default = Reply(text=LESSON)
    code = (
        "from lessonq.ingest import LessonRequest, enqueue\n"
        "enqueue(LessonRequest(task='dying producer', attempt='a', outcome='ERROR: x', trigger='error'))\n"
        "from lessonq.outbox import drain\n"
        "drain()\n"  # as the node's dispatcher would, in the same process here
    )
    proc = run_dying(code, point, queue_dir)
    assert proc.returncode == 137, proc.stderr
    job_id = LessonRequest(task="dying producer", attempt="a", outcome="ERROR: x", trigger="error").job_id
    if point == "outbox.before_send":
        # The job was accepted (its row committed as dispatched), then the dispatcher died before it
        # sent the message: the entry is still owed, and the worker's dispatcher sends it.
        assert Job.objects.get(pk=job_id).dispatched_at is not None
        assert Outbox.objects.filter(job_id=job_id).exists()
    if point == "wal.append.after_tmp":
        # Not durable yet: the producer never heard "accepted", and nothing half-written is visible.
        assert not wal().exists(job_id) and wal().count() == 0
        assert Job.objects.count() == 0
        return
    lesson_worker()
    settle(job_id)
    assert Job.objects.get(pk=job_id).state == JobState.SUCCEEDED
    # The worker's dispatcher sent what was owed (only it deletes an entry).
    wait_for(lambda: not Outbox.objects.exists(), what="the outbox sent")
    assert_invariant()


@pytest.mark.parametrize("point", ["retry.after_wal", "retry.after_row"])
def test_a_crash_during_dlq_retry_is_repaired(
    point: str, queue_dir: Path, fake_openai: Any, lesson_worker: Any
) -> None:
    from lessonq import processing

    fake_openai.script(Reply(text="no blocks"))
    job_id = submit("retry me")
    processing.process(job_id)
    assert Job.objects.get(pk=job_id).state == JobState.DEAD
    proc = run_dying(f"from lessonq import dlq\ndlq.retry('{job_id}')\n", point, queue_dir)
    assert proc.returncode == 137, proc.stderr
    fake_openai.default = Reply(text=LESSON)
    lesson_worker()
    settle(job_id)
    # After retry.after_wal the retry did not happen (still dead; retry again); after retry.after_row it did.
    assert Job.objects.get(pk=job_id).state == ("dead" if point == "retry.after_wal" else "succeeded")
    assert_invariant()


def test_repeated_kills_under_load_lose_nothing_and_duplicate_nothing(
    queue_dir: Path, fake_openai: Any, lesson_worker: Any
) -> None:
    fake_openai.responder = lambda payload: Reply(
        delay=0.4, text=LESSON.replace("edit large file", payload["messages"][1]["content"][:40])
    )
    worker = lesson_worker(concurrency=2, LESSONQ_MAX_ATTEMPTS="10")
    ids = [submit(f"load {i}") for i in range(8)]
    killed: list[int] = []
    for kills in (1, 2, 3):
        # the sweeper (beat's job) keeps running meanwhile: the filesystem broker loses a killed child's message
        wait_for(
            lambda k=kills: reconcile.sweep() and len(fake_openai.chat_requests()) >= 2 * k,
            timeout=60,
            interval=0.2,
            what=f"{2 * kills} LLM calls",
        )
        # Kill a child that is in the middle of a job (an idle prefork child may hold the pool's queue lock,
        # and killing it stalls billiard's pool: a Celery limitation, not what this test is about).
        busy = wait_for(
            lambda: [
                int(c.rpartition(":")[2])
                for c in Job.objects.filter(pk__in=ids, state="running").values_list("claimed_by", flat=True)
                if int(c.rpartition(":")[2]) in worker.child_pids() and int(c.rpartition(":")[2]) not in killed
            ],
            timeout=60,
            what="a child mid-job",
        )
        os.kill(busy[0], signal.SIGKILL)
        killed.append(busy[0])
    settle(*ids, timeout=120)
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"succeeded"}
    # Every job ended with a lesson; near-identical ones reinforce each other (chatcli's dedupe, docs/compat/chatcli.md#dedupe),
    # so several jobs may point at one lesson, and no job ever made two (source_job_id is unique).
    lesson_ids = list(Job.objects.filter(pk__in=ids).values_list("lesson_id", flat=True))
    assert None not in lesson_ids
    assert Lesson.objects.filter(pk__in=lesson_ids).count() == len(set(lesson_ids))
    assert Lesson.objects.filter(source_job_id__in=ids).count() == len(set(lesson_ids))
    assert JobAttempt.objects.filter(job_id__in=ids, outcome="lost").count() >= 1
    assert_invariant()
