"""Two real nodes over the test PostgreSQL and Redis, as docs/deployment.md lays them out: each node is a
gunicorn web and a lesson worker with its own LESSONBOARD_NODE, data directory and metrics directory
(one per host, shared by its web and worker). Kill node B whole: node A's /readyz and Overview name B and
say its jobs went to A, A runs each of them exactly once, and A's web serves the adoption counter its
worker wrote. Then B comes back on its data directory: it runs none of the adopted jobs again and loses
none that were not adopted."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from console import dependencies
from lessonq import gojson
from lessonq.jobid import job_id as make_job_id
from lessonq.models import Job, JobAttempt, JobState, NodeAdoption, NodeLease
from lessonq.wal import Wal, WalJob
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.lessonq.test_failover import assert_one_lesson_each
from tests.support.processes import CeleryWorker, Gunicorn, subprocess_env
from tests.support.queue import LESSON
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

REDIS = os.environ.get("LESSONBOARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
LEASE = {"LESSONQ_FAILOVER": "true", "LESSONQ_NODE_LEASE": "3s", "LESSONQ_NODE_LEASE_RENEW": "500ms"}


@pytest.fixture
def redis_broker() -> Iterator[str]:
    import redis

    client = redis.Redis.from_url(REDIS, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {REDIS} is not reachable ({exc}); set LESSONBOARD_TEST_REDIS_URL")
    client.flushdb()  # this test's own database number: messages a previous run left
    yield REDIS
    client.flushdb()


@dataclass
class HostNode:
    name: str
    data: Path
    env: dict[str, str]

    @property
    def queue(self) -> str:
        return f"lessonq.{self.name}"

    @property
    def wal(self) -> Wal:
        return Wal(self.data / "lessonq" / "wal", quarantine_dir=self.data / "lessonq" / "quarantine")


def host_node(name: str, tmp_path: Path, broker: str, llm: FakeOpenAIServer) -> HostNode:
    data = tmp_path / name
    return HostNode(
        name,
        data,
        subprocess_env(
            LESSONBOARD_NODE=name,
            LESSONBOARD_DATA_DIR=str(data),
            LESSONQ_BASE_DIR=str(data / "lessonq"),
            PROMETHEUS_MULTIPROC_DIR=str(data / "metrics"),  # one per host: the web and the worker share it
            CELERY_BROKER_URL=broker,
            LESSONBOARD_METRICS_ALLOWED_ADDRESSES="127.0.0.1",
            LESSONBOARD_LLM_BASE_URL=llm.url,
            LESSONBOARD_LLM_MODEL=llm.model,
            LESSONBOARD_LLM_TIMEOUT="5s",
            LESSONQ_INITIAL_DELAY="50ms",
            LESSONQ_JITTER="0",
            LESSONQ_REDISPATCH_AFTER="1s",
            **LEASE,
        ),
    )


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def post_trigger(web: Gunicorn, token: str, task: str) -> str:
    body = json.dumps({"task": task, "output": "a", "error": "ERROR: x"}).encode()
    request = urllib.request.Request(
        web.url + "/api/v1/reflexion/triggers",
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 202
        return str(json.loads(response.read())["job_id"])


def scrape(web: Gunicorn) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(web.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def kill_node(worker: CeleryWorker, web: Gunicorn) -> None:
    """The whole host dies at once: every process of the node, kill -9, no drain, no hand-over."""
    for process in (worker, web):
        for pid in children(process.pid):
            os.kill(pid, signal.SIGKILL)
        process.kill()


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def alerts_fire_on(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], lost: str, tmp_path: Path) -> None:
    """promtool, fed the series exactly as A's web exported them (names, labels, values) after a healthy
    start: the "node lost" and "node adopted" rules fire for the lost node."""
    if shutil.which("promtool") is None:
        return
    rules = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "lessonboard-alerts.yml"
    series = []
    for (name, labels), value in metrics.items():
        if name not in ("lessonboard_lessonq_node_up", "lessonboard_lessonq_adopted_jobs_total"):
            continue
        selector = ",".join(['instance="a:8000"', *[f'{k}="{v}"' for k, v in labels]])
        before = 1 if name.endswith("_node_up") else 0  # before the kill: b up, nothing adopted yet
        series.append({"series": f"{name}{{{selector}}}", "values": f"{before}x2 {value:g}x20"})
    expected = {
        "LessonqNodeLost": {"severity": "critical", "node": lost},
        "LessonqNodeAdopted": {"severity": "warning", "instance": "a:8000", "from_node": lost},
    }
    cases = [
        {
            "eval_time": "6m",
            "alertname": name,
            "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations(rules, name, labels)}],
        }
        for name, labels in expected.items()
    ]
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": cases}],
    }
    path = tmp_path / "deployment-series.test.yml"
    path.write_text(json.dumps(test))  # JSON is YAML
    run = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def annotations(rules: Path, alert: str, labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations with its ``{{ $labels.x }}`` filled in (these two rules use nothing else)."""
    import yaml

    [rule] = [r for g in yaml.safe_load(rules.read_text())["groups"] for r in g["rules"] if r.get("alert") == alert]
    filled = {}
    for key, text in rule["annotations"].items():
        for name, value in labels.items():
            text = text.replace(f"{{{{ $labels.{name} }}}}", value)
        filled[key] = text
    return filled


def test_two_nodes_one_killed_is_named_by_the_other_which_adopts_its_jobs_once(
    redis_broker: str,
    fake_openai: FakeOpenAIServer,
    start_worker: Callable[..., CeleryWorker],
    start_gunicorn: Callable[..., Gunicorn],
    agent_token: Callable[..., str],
    queue_dir: Path,
    settings: Any,
    tmp_path: Path,
    client_as: Any,
    alice: Any,
) -> None:
    a = host_node(settings.NODE, tmp_path, redis_broker, fake_openai)
    b = host_node(settings.NODE + "b", tmp_path, redis_broker, fake_openai)
    token = agent_token("two-nodes", "full")
    fake_openai.script(Reply(delay=120, text=LESSON), Reply(delay=120, text=LESSON))  # B's two in-flight calls
    fake_openai.responder = lambda payload: Reply(
        text=LESSON.replace("edit large file", payload["messages"][1]["content"][:40])
    )

    def start(node: HostNode) -> tuple[CeleryWorker, Gunicorn]:
        worker = start_worker(queues=[node.queue], env=node.env, concurrency=2, hostname=f"{node.name}@%h")
        return worker, start_gunicorn(env=node.env, workers=1)

    _worker_a, web_a = start(a)
    worker_b, web_b = start(b)

    def both_nodes_report_themselves() -> bool:
        leases = NodeLease.objects.filter(node__in=[a.queue, b.queue], epoch__gt=0, web_seen_at__isnull=False)
        return leases.count() == 2

    wait_for(both_nodes_report_themselves, timeout=60, what="each node's worker and web stamping its own lease row")
    ready = get_json(web_a.url + "/readyz")
    assert ready["checks"]["nodes"]["ok"] and b.name in ready["checks"]["nodes"]["detail"]

    ids = [post_trigger(web_b, token, f"two real nodes job {n}") for n in range(8)]
    in_flight = wait_for(
        lambda: (
            len(fake_openai.chat_requests()) == 2
            and list(Job.objects.filter(pk__in=ids, state=JobState.RUNNING).values_list("pk", flat=True))
        ),
        timeout=60,
        what="B's two LLM calls in flight",
    )
    assert len(in_flight) == 2 and all(b.wal.exists(i) for i in ids)

    kill_node(worker_b, web_b)
    killed_at = timezone.now()

    def a_names_b() -> str:
        detail = str(get_json(web_a.url + "/readyz")["checks"]["nodes"]["detail"])
        return detail if f"node {b.name} is gone" in detail and f"its jobs were adopted by {a.queue}" in detail else ""

    detail = wait_for(a_names_b, timeout=60, interval=0.2, what="A's /readyz naming B and who adopted its jobs")
    named_after = (timezone.now() - killed_at).total_seconds()
    print(f"\nA's /readyz named B gone and adopted {named_after:.1f} s after the kill (lease 3 s, renewal 0.5 s)")
    assert "job(s) adopted from it in all" in detail

    wait_for(
        lambda: Job.objects.filter(pk__in=ids, node=a.queue, state=JobState.SUCCEEDED).count() == 8,
        timeout=120,
        interval=0.2,
        what="node A finishing every job of node B",
    )
    # Exactly once: the tries that died with B count as lost, then one success each on A; nothing else.
    for job_id in ids:
        outcomes = [x.outcome for x in JobAttempt.objects.filter(job_id=job_id).order_by("started_at")]
        assert outcomes == (["lost", "success"] if job_id in in_flight else ["success"]), job_id
    assert_one_lesson_each(ids)
    assert len(fake_openai.chat_requests()) == 2 + 8
    adopted = sum(NodeAdoption.objects.filter(from_node=b.queue, into_node=a.queue).values_list("jobs", flat=True))
    assert adopted == 8 == NodeLease.objects.get(node=b.queue).adopted_jobs

    # A's web serves what A's worker counted (one metrics directory per host), and the node-lost series.
    metrics = wait_for(
        lambda: (
            m
            if (m := scrape(web_a)).get(
                ("lessonboard_lessonq_adopted_jobs_total", (("from_node", b.queue), ("kind", "active")))
            )
            == 8
            else None
        ),
        timeout=30,
        what="the adoption counter on A's web's /metrics",
    )
    assert metrics[("lessonboard_lessonq_node_up", (("node", b.queue),))] == 0
    assert metrics[("lessonboard_lessonq_node_up", (("node", a.queue),))] == 1
    alerts_fire_on(metrics, b.queue, tmp_path)

    # The Overview (any web of the deployment renders it from the same rows): B gone, its jobs on A.
    settings.NODE, settings.LESSONQ_QUEUE = a.name, a.queue
    page = client_as(alice).get("/").content.decode()
    row_b = page.split(f'data-node="{b.name}"')[1].split("</tr>")[0]
    assert row_b.startswith(' class="bad"') and f"its jobs were adopted by {a.queue}" in row_b
    assert "8 job(s) adopted from it in all" in row_b
    row_a = page.split(f'data-node="{a.name}"')[1].split("</tr>")[0]
    assert row_a.startswith(' class="ok"') and "<td>8 job(s)</td>" in row_a
    # never "workers down" while A works (A renews its lease every 500 ms; a loaded machine may read it late)
    ok, workers = wait_for(
        lambda: (lambda r: r if r[0] and a.name in r[1] else None)(dependencies._workers()),
        timeout=30,
        what="A named among the live workers",
    )
    assert ok and a.name in workers and f"{b.name} gone since" in workers

    # B comes back on its data directory. Its WAL still holds its copies of the 8 adopted jobs, and one
    # trigger its web accepted while the database was down (a record with no row): that one is B's.
    now = timezone.now()
    orphan = WalJob(
        id=make_job_id(task="accepted while the database was down", attempt="a", outcome="ERROR: x", trigger="error"),
        task="accepted while the database was down",
        attempt="a",
        outcome="ERROR: x",
        trigger="error",
        enqueued_at=gojson.local(now),
        next_attempt_at=gojson.local(now),
    )
    assert b.wal.append(orphan) and all(b.wal.exists(i) for i in ids)
    returned_at = timezone.now()
    start_worker(queues=[b.queue], env=b.env, concurrency=2, hostname=f"{b.name}@%h")
    wait_for(
        lambda: Job.objects.filter(pk=orphan.id, node=b.queue, state=JobState.SUCCEEDED).exists(),
        timeout=60,
        what="B replaying the record that was never adopted and running it",
    )
    wait_for(lambda: not any(b.wal.exists(i) for i in ids), timeout=60, what="B moving the adopted copies aside")
    expired = b.data / "lessonq" / "expired"
    assert sum(1 for p in expired.rglob("*") if p.is_file() and any(i in p.name for i in ids)) == 8  # kept aside
    assert JobAttempt.objects.filter(job_id__in=ids, started_at__gte=returned_at).count() == 0  # none ran twice
    assert Job.objects.filter(pk__in=ids, node=a.queue, state=JobState.SUCCEEDED).count() == 8
    assert len(fake_openai.chat_requests()) == 2 + 8 + 1
    wait_for(lambda: get_json(web_a.url + "/readyz")["checks"]["nodes"]["ok"], timeout=30, what="B alive again")
