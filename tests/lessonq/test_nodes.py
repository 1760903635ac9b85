"""Per-node health from the nodes themselves (lessonq.presence), the scheduler's leader lease
(lessonq.leader), what /readyz, the Overview and /metrics say about them, and the per-host metrics
directory's clean-up (lessonboard.multiproc)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from console import dependencies
from lessonboard import multiproc
from lessonboard.models import BreakerState, LLMBreaker
from lessonq import leader, presence
from lessonq.failover import Keeper, acquire, adopt, adopt_expired
from lessonq.models import Job, LeaderLease, NodeAdoption, NodeLease
from tests.lessonq.test_failover import Node, become, lease_runs_out, submit_on
from tests.lessonq.test_metrics import sample, scrape

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def nodes(queue_dir: Path, tmp_path: Path, settings: Any) -> tuple[Node, Node]:
    """Node A (the test's own queue dir) and node B, each with its own WAL directory."""
    b = tmp_path / "node-b"
    for sub in ("wal", "dlq", "quarantine", "expired"):
        (b / sub).mkdir(parents=True)
    return Node(settings.NODE, queue_dir), Node(settings.NODE + "b", b)


def test_a_web_alone_stamps_its_node_and_is_never_adopted_from(nodes: tuple[Node, Node], settings: Any) -> None:
    a, b = nodes
    [job] = submit_on(settings, b, "accepted by b's web before b's worker ever ran")
    presence.web_seen(b.queue)
    lease = NodeLease.objects.get(node=b.queue)
    assert lease.epoch == 0 and lease.web_seen_at is not None and lease.web_holder.endswith(f":{os.getpid()}")
    NodeLease.objects.filter(node=b.queue).update(expires_at=timezone.now() - timedelta(hours=1))
    assert adopt_expired(into=a.queue, target=a.wal()) == 0  # no worker has held it: nothing is "dead"
    assert Job.objects.get(pk=job).node == b.queue
    [state] = [s for s in presence.nodes() if s.node == b.queue]
    assert state.web_live and not state.worker_live and not state.gone
    assert state.worker_text == "no worker has held the lease yet"

    assert acquire(b.queue).epoch == 1  # b's worker starts: its first epoch, the web's stamp kept
    lease.refresh_from_db()
    assert lease.epoch == 1 and lease.web_seen_at is not None


def test_a_gone_node_is_named_with_whose_jobs_were_adopted_on_readyz_the_overview_and_metrics(
    nodes: tuple[Node, Node], settings: Any, client_as: Any, alice: Any
) -> None:
    a, b = nodes
    ids = submit_on(settings, b, "b1", "b2", "b3")
    acquire(a.queue)
    acquire(b.queue)
    presence.web_seen(a.queue)
    presence.web_seen(b.queue)
    become(settings, a)
    ok, detail = presence.check_nodes()
    assert ok and a.name in detail and b.name in detail

    lease_runs_out(b)  # b's whole node died: its worker stopped renewing
    ok, detail = presence.check_nodes()
    assert not ok and f"node {b.name} is gone" in detail and "3 active job(s) wait for adoption" in detail

    assert adopt(b.queue, into=a.queue, target=a.wal()) == 3
    [record] = NodeAdoption.objects.filter(from_node=b.queue)
    assert (record.into_node, record.kind, record.jobs) == (a.queue, "active", 3)
    assert record.epoch == NodeLease.objects.get(node=b.queue).epoch
    assert Job.objects.filter(pk__in=ids, node=a.queue).count() == 3

    response = Client().get("/readyz")
    body = response.json()
    assert response.status_code == 200 and body["status"] == "degraded"
    nodes_check = body["checks"]["nodes"]
    assert nodes_check["advisory"] and not nodes_check["ok"]
    assert f"node {b.name} is gone" in nodes_check["detail"]
    assert f"its jobs were adopted by {a.queue}" in nodes_check["detail"]
    assert "3 job(s) adopted from it in all" in nodes_check["detail"]

    page = client_as(alice).get("/").content.decode()
    card = page.split('id="nodes"')[1].split("</section>")[0]
    row_b = card.split(f'data-node="{b.name}"')[1].split("</tr>")[0]
    assert row_b.startswith(' class="bad"') and "gone" in row_b and f"its jobs were adopted by {a.queue}" in row_b
    assert "3 job(s) adopted from it in all" in row_b
    row_a = card.split(f'data-node="{a.name}"')[1].split("</tr>")[0]
    assert row_a.startswith(' class="ok"') and "<td>3 job(s)</td>" in row_a  # the adoptions a made

    families = scrape()
    assert sample(families, "lessonboard_lessonq_node_up", node=a.queue) == 1
    assert sample(families, "lessonboard_lessonq_node_up", node=b.queue) == 0
    # 0, not missing (``sample`` reads a missing series as 0): the "node lost" alert needs the series.
    assert any(s.labels == {"node": b.queue} for s in families["lessonboard_lessonq_node_up"].samples)


def test_the_workers_dependency_comes_from_the_nodes_leases_not_from_beat(
    nodes: tuple[Node, Node], settings: Any
) -> None:
    a, b = nodes
    acquire(a.queue)
    acquire(b.queue)
    lease_runs_out(b)
    ok, detail = dependencies._workers()
    assert ok and a.name in detail and f"{b.name} gone since" in detail


def test_the_keeper_writes_its_own_workers_heartbeat(nodes: tuple[Node, Node], settings: Any) -> None:
    from lessonboard.models import WorkerHeartbeat

    a, _ = nodes
    become(settings, a)
    Keeper().tick()
    beat = WorkerHeartbeat.objects.get(node=a.name)
    assert beat.beats == 1 and timezone.now() - beat.last_seen < timedelta(minutes=1)
    assert NodeLease.objects.get(node=a.queue).epoch == 1


def test_one_holder_leads_until_its_lease_runs_out_or_it_hands_it_back() -> None:
    LeaderLease.objects.all().delete()
    assert leader.check_scheduler() == (
        False,
        "no beat has held the scheduler lease yet (run beat on at least one node)",
    )
    assert leader.hold("a:h:1") == 1
    assert leader.hold("b:h:2") is None  # a standby: another holds a live lease
    assert leader.hold("a:h:1") == 1  # a renewal keeps the epoch
    ok, detail = leader.check_scheduler()
    assert ok and detail.startswith("held by a:h:1")
    LeaderLease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))  # a's node died
    ok, detail = leader.check_scheduler()
    assert not ok and detail.startswith("no scheduler: the lease of a:h:1")
    assert leader.hold("b:h:2") == 2  # taken over
    assert leader.hold("a:h:1") is None  # a, back from a pause, does not lead again
    assert leader.release("b:h:2") and leader.hold("a:h:1") == 3  # a clean stop hands it over at once

    assert sample(scrape(), "lessonboard_scheduler_up") == 1
    LeaderLease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert sample(scrape(), "lessonboard_scheduler_up") == 0
    cache.delete("lessonboard:dependencies")
    [beat] = [d for d in dependencies.states() if d.name == "beat"]
    assert not beat.ok and "no scheduler" in beat.detail


def test_a_standby_scheduler_sends_nothing_and_the_leader_sends(settings: Any, tmp_path: Path) -> None:
    from lessonboard.celery import app

    LeaderLease.objects.all().delete()
    sent: list[str] = []

    class Recording(leader.LeaderScheduler):
        def apply_async(self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any) -> Any:
            sent.append(entry.task)

    scheduler = Recording(app=app, schedule_filename=str(tmp_path / "beat-schedule"))
    try:
        for entry in scheduler.schedule.values():
            entry.last_run_at = timezone.now() - timedelta(days=1)  # everything is due
        assert leader.hold("other:h:9") == 1
        for _ in range(5):
            scheduler.tick()
        assert sent == [] and scheduler.epoch is None  # standby: another beat leads
        LeaderLease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))  # its node died
        scheduler._next_check = 0.0
        for _ in range(len(scheduler.schedule) + 2):
            scheduler.tick()
        assert scheduler.epoch == 2 and LeaderLease.objects.get().holder == scheduler.holder
        assert {"lessonq.tasks.sweep_all", "lessonboard.tasks.probe_llm", "lessonq.retention.enforce_all"} <= set(sent)
    finally:
        scheduler.close()
    assert LeaderLease.objects.get().expires_at <= timezone.now()  # handed back on close


def test_a_real_call_that_succeeds_closes_an_open_breaker_once_a_probe_is_due(fake_openai: Any, settings: Any) -> None:
    from lessonboard import llm

    settings.LLM_BREAKER_PROBE_INTERVAL = 30.0
    now = timezone.now()
    row = {"state": BreakerState.OPEN, "failures": 5, "opened_at": now, "last_error": "down"}
    LLMBreaker.objects.update_or_create(
        pk=settings.LLM_BASE_URL, defaults={**row, "probe_at": now + timedelta(minutes=1)}
    )
    with pytest.raises(llm.LLMUnreachable):  # no probe due: refused at once
        llm.chat([{"role": "user", "content": "hello"}])
    assert fake_openai.chat_requests() == []
    LLMBreaker.objects.filter(pk=settings.LLM_BASE_URL).update(probe_at=now - timedelta(seconds=1))  # no probe ran
    assert llm.chat([{"role": "user", "content": "hello"}]).text  # this call is the trial, and it succeeds
    breaker = LLMBreaker.objects.get(pk=settings.LLM_BASE_URL)
    assert breaker.state == BreakerState.CLOSED and breaker.failures == 0 and breaker.probes == 1


def test_the_metrics_clean_up_removes_only_the_files_of_processes_that_are_gone(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    live_pid = os.getpid()
    files = {
        name: tmp_path / name
        for name in (
            f"counter_{dead_pid}.db",
            f"gauge_livesum_{dead_pid}.db",
            f"counter_{live_pid}.db",
            f"histogram_{live_pid}.db",
            "notes.txt",
        )
    }
    for path in files.values():
        path.write_bytes(b"x")
    removed = multiproc.clean(tmp_path)
    assert sorted(p.name for p in removed) == sorted([f"counter_{dead_pid}.db", f"gauge_livesum_{dead_pid}.db"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"counter_{live_pid}.db", f"histogram_{live_pid}.db", "notes.txt"]
    )
    run = subprocess.run(
        [sys.executable, "-m", "lessonboard.multiproc", str(tmp_path / "new")], capture_output=True, text=True
    )
    assert run.returncode == 0 and (tmp_path / "new").is_dir()
