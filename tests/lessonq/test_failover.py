"""Node failover (docs/architecture.md#node-failover): a node whose lease ran out has its active and dead
jobs adopted, exactly once, by a live node, from their rows, under the same JobIDs; a node that comes back
after being adopted from processes none of them again. Two nodes here are two WAL directories and two
queue names over the test database and broker; the last test runs them as real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from lessonq import dlq, processing, reconcile
from lessonq.failover import Fenced, acquire, adopt, adopt_expired, ensure_ours, renew
from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job, JobAttempt, JobState, NodeLease, Outbox
from lessonq.wal import Wal
from lessons.models import Lesson
from tests.fakes.openai_server import Reply
from tests.lessonq.test_crash import assert_invariant
from tests.lessonq.test_dlq import dead_job
from tests.lessonq.test_metrics import sample, scrape
from tests.support.processes import ROOT, CeleryWorker, subprocess_env
from tests.support.queue import LESSON
from tests.support.wait import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class Node:
    name: str
    base: Path

    @property
    def queue(self) -> str:
        return f"lessonq.{self.name}"

    def wal(self) -> Wal:
        return Wal(self.base / "wal", quarantine_dir=self.base / "quarantine")

    def dlq(self) -> Wal:
        return Wal(self.base / "dlq", quarantine_dir=self.base / "quarantine")


@pytest.fixture
def nodes(queue_dir: Path, tmp_path: Path, settings: Any) -> tuple[Node, Node]:
    """Node A (the test's own queue dir) and node B, each with its own WAL directory."""
    b = tmp_path / "node-b"
    for sub in ("wal", "dlq", "quarantine", "expired"):
        (b / sub).mkdir(parents=True)
    return Node(settings.NODE, queue_dir), Node(settings.NODE + "b", b)


def become(settings: Any, node: Node) -> None:
    """This test process acts as ``node`` (its web or a worker of it)."""
    settings.NODE, settings.LESSONQ_QUEUE, settings.LESSONQ_BASE_DIR = node.name, node.queue, node.base


def submit_on(settings: Any, node: Node, *tasks: str) -> list[str]:
    become(settings, node)
    return [enqueue(LessonRequest(task=t, attempt="a", outcome="ERROR: x", trigger="error")).job_id for t in tasks]


def lease_runs_out(node: Node) -> None:
    """The node stopped renewing long enough ago (what a kill -9 and LESSONQ_NODE_LEASE lead to)."""
    assert NodeLease.objects.filter(node=node.queue).update(expires_at=timezone.now() - timedelta(seconds=1)) == 1


def test_a_lease_keeps_its_epoch_while_renewed_and_a_stale_epoch_cannot_renew(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    first = acquire(a.queue)
    assert first.new and first.epoch == 1
    second_process = acquire(a.queue)  # another process of the same live node joins its epoch
    assert not second_process.new and second_process.epoch == 1
    assert renew(1, a.queue)
    lease_runs_out(a)
    Job.objects.create(
        id="0" * 16, node=a.queue, trigger="error", enqueued_at=timezone.now(), next_attempt_at=timezone.now()
    )
    assert adopt(a.queue, into=b.queue, target=b.wal()) == 1
    assert not renew(1, a.queue)  # the old incarnation learns it was adopted from
    back = acquire(a.queue)
    assert back.new and back.epoch == 3 and back.adopted_by == b.queue
    assert renew(3, a.queue)
    assert acquire(a.queue).adopted_by == ""  # told once


def test_a_live_node_is_not_adopted_from(nodes: tuple[Node, Node], settings: Any) -> None:
    a, b = nodes
    ids = submit_on(settings, a, "still alive")
    acquire(a.queue)
    assert adopt_expired(into=b.queue, target=b.wal()) == 0
    assert Job.objects.get(pk=ids[0]).node == a.queue and not b.wal().exists(ids[0])


def test_adoption_moves_the_active_jobs_with_their_records_under_the_same_job_ids(
    nodes: tuple[Node, Node], settings: Any
) -> None:
    a, b = nodes
    pending, running, done = submit_on(settings, a, "pending one", "running one", "done one")
    assert Job.objects.get(pk=running).claim(timeout=60)
    Job.objects.get(pk=done).mark_succeeded(None)
    a.wal().ack(done)
    # A message node A's dispatcher still owed when it died (a worker of the session may have sent A's).
    Outbox.objects.update_or_create(job_id=pending, defaults={"node": a.queue, "created_at": timezone.now()})
    acquire(a.queue)
    lease_runs_out(a)

    assert adopt_expired(into=b.queue, target=b.wal()) == 2
    assert not Outbox.objects.filter(job_id__in=[pending, running]).exists()  # B's sweep dispatches them
    for job_id in (pending, running):
        job = Job.objects.get(pk=job_id)
        assert job.node == b.queue and job.dispatched_at is None and "adopted from" in job.waiting_reason
        record = b.wal().read(job_id)  # rebuilt from the row: the whole request, the attempts so far
        assert record is not None
        assert (record.task, record.attempt, record.outcome, record.trigger, record.attempts) == (
            job.task,
            job.output,
            job.outcome,
            job.trigger,
            job.attempts,
        )
    assert Job.objects.get(pk=running).claim_expires_at <= timezone.now()  # the dead node's claim ended
    assert Job.objects.get(pk=done).node == a.queue  # finished jobs stay where they ran
    lease = NodeLease.objects.get(node=a.queue)
    assert (lease.epoch, lease.adopted_by, lease.adopted_jobs) == (2, b.queue, 2)
    assert adopt_expired(into=b.queue, target=b.wal()) == 0  # exactly once

    become(settings, b)  # the adopter takes the running job over: the lost try counts
    job = Job.objects.get(pk=running)
    assert job.claim(timeout=60) and Job.objects.get(pk=running).attempts == 2


def test_the_adopter_renews_its_own_lease_while_it_adopts_a_big_backlog(
    nodes: tuple[Node, Node], settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keeper adopting a dead node's backlog renews its own lease between batches when a renewal is due
    (else a backlog that outlasts a lease shows it as gone and a third node adopts from it), and stops
    adopting once it learns another node adopted from it."""
    from lessonq import failover

    a, b = nodes
    submit_on(settings, a, *(f"backlog {n}" for n in range(failover.ADOPT_BATCH * 2 + 10)))
    acquire(a.queue)
    lease_runs_out(a)
    become(settings, b)
    keeper = failover.Keeper()
    keeper.epoch = acquire(b.queue).epoch
    clock = [1000.0]
    monkeypatch.setattr(failover.time, "monotonic", lambda: clock[0])
    keeper.renewed_at = clock[0]
    write_records = failover.write_records

    def slow_batch(target: Wal, jobs: list[Job]) -> list[str]:
        clock[0] += settings.LESSONQ_NODE_LEASE_RENEW  # each batch takes a renewal interval
        return write_records(target, jobs)

    monkeypatch.setattr(failover, "write_records", slow_batch)
    renewals: list[int] = []
    real_renew = failover.renew
    monkeypatch.setattr(failover, "renew", lambda epoch, node=None: renewals.append(epoch) or real_renew(epoch, node))
    assert adopt_expired(between=keeper.keep_alive) == failover.ADOPT_BATCH * 2 + 10
    assert renewals == [keeper.epoch] * 3  # one renewal after each of the 3 batches, none skipped

    # Adopted from meanwhile (its epoch moved on): the next batch's check stops the adoption.
    NodeLease.objects.filter(node=b.queue).update(epoch=keeper.epoch + 1)
    clock[0] += settings.LESSONQ_NODE_LEASE_RENEW
    with pytest.raises(failover.LeaseLost):
        keeper.keep_alive()


def test_a_repeat_sent_to_another_node_while_the_job_is_active_is_deduped_there(
    nodes: tuple[Node, Node], settings: Any
) -> None:
    """The balancer sends the same trigger to node B while node A still has the job: B answers deduped,
    keeps no record of it, and A's job and record are untouched (B used to answer accepted, rewrite the
    record into its own WAL, dispatch A's job into its queue and expire the stray record later)."""
    a, b = nodes
    (job_id,) = submit_on(settings, a, "busy on a")
    become(settings, b)
    again = enqueue(LessonRequest(task="busy on a", attempt="a", outcome="ERROR: x", trigger="error"))
    assert (again.job_id, again.status) == (job_id, "deduped")
    assert not b.wal().exists(job_id) and a.wal().exists(job_id)
    assert Job.objects.get(pk=job_id).node == a.queue


def test_two_concurrent_adopters_adopt_each_job_exactly_once(
    nodes: tuple[Node, Node], settings: Any, tmp_path: Path
) -> None:
    a, b = nodes
    c = Node(a.name + "c", tmp_path / "node-c")
    ids = submit_on(settings, a, *[f"backlog {i}" for i in range(250)])  # more than two batches
    acquire(a.queue)
    lease_runs_out(a)
    holding, release, adopted = threading.Event(), threading.Event(), []

    def adopter_b() -> None:
        try:
            with transaction.atomic():  # B is in the middle of its adoption: records written, not committed
                adopted.append(adopt(a.queue, into=b.queue, target=b.wal()))
                holding.set()
                release.wait(60)
        finally:
            connection.close()

    thread = threading.Thread(target=adopter_b)
    thread.start()
    try:
        assert holding.wait(60)
        assert adopt(a.queue, into=c.queue, target=c.wal()) == 0  # the lease row is held: C skips it
    finally:
        release.set()
        thread.join(60)
    assert adopt(a.queue, into=c.queue, target=c.wal()) == 0  # after B's commit nothing is A's any more
    assert adopted == [250]
    assert Job.objects.filter(pk__in=ids, node=b.queue).count() == 250
    assert all(b.wal().exists(i) for i in ids)
    assert c.wal().count() == 0
    become(settings, b)
    assert_invariant()


def test_a_job_adopted_mid_attempt_is_fenced_and_its_lesson_saved_once(
    nodes: tuple[Node, Node], settings: Any, fake_openai: Any
) -> None:
    a, b = nodes
    [job_id] = submit_on(settings, a, "adopted while its LLM call is in flight")
    acquire(a.queue)
    adopted: list[int] = []

    def adopt_during_the_call(payload: Any) -> Reply:
        if not adopted:  # A looks dead to B while A's worker waits for the LLM
            try:
                lease_runs_out(a)
                adopted.append(adopt(a.queue, into=b.queue, target=b.wal()))
            finally:
                connection.close()
        return Reply(text=LESSON)

    fake_openai.responder = adopt_during_the_call
    assert processing.process(job_id) == "fenced"
    assert adopted == [1]
    assert Lesson.objects.filter(source_job_id=job_id).count() == 0  # A's answer is dropped
    assert not a.wal().exists(job_id) and b.wal().exists(job_id)
    job = Job.objects.get(pk=job_id)
    assert job.node == b.queue and job.state == JobState.RUNNING
    with transaction.atomic(), pytest.raises(Fenced):
        ensure_ours(job)
    assert not job.claim(timeout=60)  # A's claim matches no row of its node
    assert processing.process(job_id) == "other-node"

    become(settings, b)
    assert processing.process(job_id) == "success"
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.attempts == 2
    assert [x.outcome for x in job.attempt_rows.all()] == ["lost", "success"]
    assert Lesson.objects.filter(source_job_id=job_id).count() == 1
    assert_invariant()


def test_a_returning_node_drops_the_records_of_adopted_jobs_instead_of_replaying_them(
    nodes: tuple[Node, Node], settings: Any
) -> None:
    a, b = nodes
    ids = submit_on(settings, a, "x", "y")
    acquire(a.queue)
    lease_runs_out(a)
    assert adopt(a.queue, into=b.queue, target=b.wal()) == 2
    assert all(a.wal().exists(i) for i in ids)  # A's disk still holds them while A is down

    back = acquire(a.queue)
    assert back.new and back.adopted_by == b.queue
    become(settings, a)
    report = reconcile.replay()
    assert report.adopted == 0 and not any(a.wal().exists(i) for i in ids)
    assert Job.objects.filter(pk__in=ids, node=b.queue).count() == 2
    assert_invariant()
    become(settings, b)
    assert_invariant()


def dead_on(settings: Any, node: Node, fake_openai: Any, *tasks: str) -> list[str]:
    """Jobs of ``node`` that died there (the model's reply cannot be parsed): dead rows, DLQ records."""
    become(settings, node)
    return [dead_job(fake_openai, task) for task in tasks]


def adopted_metric(node: Node, kind: str) -> float:
    return sample(scrape(), "lessonboard_lessonq_adopted_jobs_total", from_node=node.queue, kind=kind)


def test_adoption_takes_the_dead_jobs_over_with_their_dlq_records_so_the_adopter_can_retry_them(
    nodes: tuple[Node, Node], settings: Any, fake_openai: Any
) -> None:
    a, b = nodes
    dead = dead_on(settings, a, fake_openai, "died on A 1", "died on A 2", "died on A 3")
    [pending] = submit_on(settings, a, "still pending on A")
    finished_at = {j.pk: j.finished_at for j in Job.objects.filter(pk__in=dead)}
    before = {kind: adopted_metric(a, kind) for kind in ("active", "dead")}
    acquire(a.queue)
    lease_runs_out(a)

    assert adopt_expired(into=b.queue, target=b.wal(), dead_target=b.dlq()) == 4
    for job in Job.objects.filter(pk__in=dead):  # still dead, as they died; now B's, records on B's disk
        assert (job.node, job.state, job.finished_at) == (b.queue, JobState.DEAD, finished_at[job.pk])
        record = b.dlq().read(job.pk)
        assert record is not None and not b.wal().exists(job.pk)
        assert (record.task, record.attempt, record.outcome, record.attempts, record.last_error) == (
            job.task,
            job.output,
            job.outcome,
            job.attempts,
            job.last_error,
        )
    assert Job.objects.get(pk=pending).node == b.queue and b.wal().exists(pending)
    assert NodeLease.objects.get(node=a.queue).adopted_jobs == 4
    assert adopted_metric(a, "active") == before["active"] + 1
    assert adopted_metric(a, "dead") == before["dead"] + 3
    assert adopt_expired(into=b.queue, target=b.wal(), dead_target=b.dlq()) == 0  # exactly once
    assert adopted_metric(a, "dead") == before["dead"] + 3

    become(settings, b)  # B's triage: Retry of one, then a bulk retry of the others, run right here
    assert_invariant()
    assert dlq.retry(dead[0]).node == b.queue
    result = dlq.retry_many(dead[1:])
    assert sorted(result.done) == sorted(dead[1:]) and not result.sent and not result.failed
    for job_id in dead:
        assert Job.objects.get(pk=job_id).state == JobState.PENDING
        assert b.wal().exists(job_id) and not b.dlq().exists(job_id)
    fake_openai.responder = lambda payload: Reply(
        text=LESSON.replace("edit large file", payload["messages"][1]["content"][:40])
    )
    assert [processing.process(i) for i in dead] == ["success"] * 3
    assert_one_lesson_each(dead)
    assert_invariant()

    acquire(a.queue)  # A comes back: its copies of the dead jobs' records leave its DLQ, none is replayed
    become(settings, a)
    assert all(a.dlq().exists(i) for i in dead)
    reconcile.replay()
    assert not any(a.dlq().exists(i) or a.wal().exists(i) for i in dead)
    assert Job.objects.filter(pk__in=dead, node=b.queue, state=JobState.SUCCEEDED).count() == 3
    assert_invariant()


def assert_one_lesson_each(ids: list[str]) -> None:
    """Every job ended with a lesson and none made two (near-identical lessons reinforce one another, so
    several jobs may point at one lesson, which only the first of them created)."""
    lesson_ids = list(Job.objects.filter(pk__in=ids).values_list("lesson_id", flat=True))
    assert len(lesson_ids) == len(ids) and None not in lesson_ids
    assert Lesson.objects.filter(source_job_id__in=ids).count() == len(set(lesson_ids))


def adopt_in_a_dying_process(node: Node, dead: Node, point: str) -> subprocess.CompletedProcess[str]:
    env = subprocess_env(
        LESSONQ_BASE_DIR=str(node.base), LESSONBOARD_NODE=node.name, LESSONQ_FAULT=point, LESSONQ_FAILOVER="true"
    )
    script = f"import django; django.setup()\nfrom lessonq import failover\nfailover.adopt({dead.queue!r})\n"
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("point", ["failover.after_wal", "failover.after_commit"])
def test_a_crash_during_adoption_is_repaired_and_adopts_once(
    point: str, nodes: tuple[Node, Node], settings: Any, fake_openai: Any
) -> None:
    a, b = nodes
    fake_openai.responder = lambda payload: Reply(
        text=LESSON.replace("edit large file", payload["messages"][1]["content"][:40])
    )
    ids = submit_on(settings, a, "crash adopt 1", "crash adopt 2")
    acquire(a.queue)
    lease_runs_out(a)
    epoch = NodeLease.objects.get(node=a.queue).epoch

    proc = adopt_in_a_dying_process(b, a, point)
    assert proc.returncode == 137, proc.stderr
    assert all(b.wal().exists(i) for i in ids)  # the records were durable before the commit
    committed = point == "failover.after_commit"
    assert Job.objects.filter(pk__in=ids, node=b.queue if committed else a.queue).count() == 2
    assert NodeLease.objects.get(node=a.queue).epoch == epoch + committed

    become(settings, b)
    reconcile.sweep()  # the row wins: records whose rows are still A's leave B's WAL
    assert all(b.wal().exists(i) for i in ids) == committed
    assert adopt(a.queue) == (0 if committed else 2)
    assert adopt(a.queue) == 0
    reconcile.sweep()  # dispatches the adopted jobs
    assert [processing.process(i) for i in ids] == ["success", "success"]
    assert_one_lesson_each(ids)
    assert_invariant()


@pytest.mark.parametrize("point", ["failover.after_wal", "failover.after_commit"])
def test_a_crash_while_adopting_dead_jobs_is_repaired_and_adopts_them_once(
    point: str, nodes: tuple[Node, Node], settings: Any, fake_openai: Any
) -> None:
    a, b = nodes
    dead = dead_on(settings, a, fake_openai, "crash adopt dead 1", "crash adopt dead 2")
    acquire(a.queue)
    lease_runs_out(a)

    proc = adopt_in_a_dying_process(b, a, point)
    assert proc.returncode == 137, proc.stderr
    assert all(b.dlq().exists(i) for i in dead)  # the records were durable before the commit
    committed = point == "failover.after_commit"
    assert Job.objects.filter(pk__in=dead, node=b.queue if committed else a.queue, state=JobState.DEAD).count() == 2

    become(settings, b)
    reconcile.sweep()  # the row wins: records whose rows are still A's leave B's DLQ
    assert all(b.dlq().exists(i) for i in dead) == committed
    assert adopt(a.queue) == (0 if committed else 2)
    assert adopt(a.queue) == 0
    assert_invariant()
    assert sorted(dlq.retry_many(dead).done) == sorted(dead)
    assert Job.objects.filter(pk__in=dead, node=b.queue, state=JobState.PENDING).count() == 2
    assert_invariant()


def kill_9(worker: CeleryWorker) -> None:
    """The whole node dies at once: its pool's children and its main process (no drain, no cleanup)."""
    for pid in worker.child_pids():
        os.kill(pid, signal.SIGKILL)
    worker.kill()


@pytest.mark.worker
def test_a_node_killed_for_good_has_its_jobs_finished_by_the_other_and_none_twice_when_it_returns(
    nodes: tuple[Node, Node], settings: Any, fake_openai: Any, lesson_worker: Any
) -> None:
    """kill -9 node A with two jobs in flight and a backlog, keep it down: node B adopts them once A's
    lease has run out and finishes every one; A comes back and processes none of them again."""
    a, b = nodes
    failover = {"LESSONQ_FAILOVER": "true", "LESSONQ_NODE_LEASE": "3s", "LESSONQ_NODE_LEASE_RENEW": "500ms"}
    fake_openai.script(Reply(delay=120, text=LESSON), Reply(delay=120, text=LESSON))  # A's two in-flight calls
    fake_openai.responder = lambda payload: Reply(
        text=LESSON.replace("edit large file", payload["messages"][1]["content"][:40])
    )
    lesson_worker(base=b.base, node=b.name, **failover)
    node_a = lesson_worker(base=a.base, node=a.name, concurrency=2, **failover)
    ids = submit_on(settings, a, *[f"two nodes job {i}" for i in range(10)])
    in_flight = wait_for(
        lambda: (
            len(fake_openai.chat_requests()) == 2
            and list(Job.objects.filter(pk__in=ids, state=JobState.RUNNING).values_list("pk", flat=True))
        ),
        timeout=60,
        what="A's two LLM calls in flight",
    )
    assert len(in_flight) == 2

    kill_9(node_a)
    wait_for(
        lambda: (
            Job.objects.filter(pk__in=ids, state=JobState.SUCCEEDED).count() == 10
            and not any(b.wal().exists(i) for i in ids)
        ),
        timeout=120,
        interval=0.2,
        what="node B finishing every job of node A",
    )
    assert set(Job.objects.filter(pk__in=ids).values_list("node", flat=True)) == {b.queue}
    for job_id in in_flight:  # the try that died with A counts, then B's
        assert [x.outcome for x in JobAttempt.objects.filter(job_id=job_id)] == ["lost", "success"]
    calls_before_return = len(fake_openai.chat_requests())
    assert calls_before_return == 12  # A's two lost calls, then one per job on B

    returned_at = timezone.now()
    node_a_again = lesson_worker(base=a.base, node=a.name, concurrency=2, **failover)
    # A consumes the messages left on its queue and refuses every one (the rows name B) ...
    wait_for(lambda: "'other-node'" in node_a_again.log(), timeout=60, what="A refusing its old messages")
    # ... its replay moves its copies of the adopted jobs out of its WAL ...
    wait_for(lambda: not any(a.wal().exists(i) for i in ids), timeout=60, what="A dropping the adopted records")
    # ... and it is a healthy node again: a new job of A runs on A.
    [fresh] = submit_on(settings, a, "a job of the returned node")
    wait_for(  # the worker unlinks the record just after the commit that finished the job
        lambda: Job.objects.filter(pk=fresh, state=JobState.SUCCEEDED).exists() and not a.wal().exists(fresh),
        timeout=60,
        what="A's new job",
    )

    assert JobAttempt.objects.filter(job_id__in=ids, started_at__gte=returned_at).count() == 0
    assert len(fake_openai.chat_requests()) == calls_before_return + 1
    assert_one_lesson_each(ids)
    assert_invariant()  # A: its one new job
    become(settings, b)
    assert_invariant()  # B: the ten adopted jobs
