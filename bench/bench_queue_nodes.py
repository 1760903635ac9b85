"""Scale-out: lesson jobs/s with one worker node, then with two, against the same database and broker
(fake LLM answering at once). Each node is its own ``LESSONBOARD_NODE`` with its own WAL directory and
queue ``lessonq.<node>``, one worker process each; the producer spreads distinct triggers over the
nodes as their web processes would. The one-node figure is the anchor of the two-node one.

    .venv/bin/python bench/bench_queue_nodes.py [N] [CONCURRENCY_PER_NODE]

On a 2-core machine two nodes share the same cores, so the ratio shows the coordination cost (shared
rows, counters, broker) rather than added capacity; run the nodes on separate hosts for the latter.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import bench_queue_env
from bench_queue_e2e import distinct_lesson
from django.conf import settings
from django.test import override_settings

from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.support.processes import CeleryWorker, purge_broker
from tests.support.wait import wait_for


def run(nodes: list[str], n: int, concurrency: int, fake: FakeOpenAIServer, tag: str) -> float:
    """jobs/s for ``n`` jobs spread over ``nodes`` (a worker per node), enqueue to succeeded."""
    base = Path(settings.LESSONQ_BASE_DIR)
    workers = [
        CeleryWorker(
            queues=[f"lessonq.{node}"],
            concurrency=concurrency,
            hostname=f"{node}@%h",
            env=bench_queue_env.env(
                LESSONBOARD_NODE=node,
                LESSONQ_BASE_DIR=str(base / node),
                LESSONBOARD_LLM_BASE_URL=fake.url,
                LESSONBOARD_LLM_MODEL=fake.model,
                LESSONBOARD_EMBEDDING_PROVIDER="none",
            ),
        )
        for node in nodes
    ]
    for worker in workers:
        worker.wait_ready()
    try:
        t0 = time.perf_counter()
        for i in range(n):
            node = nodes[i % len(nodes)]
            with override_settings(
                NODE=node, LESSONQ_QUEUE=f"lessonq.{node}", LESSONQ_BASE_DIR=base / node, LESSONQ_CAPACITY=10**6
            ):
                enqueue(LessonRequest(task=f"{tag} task {i}", attempt="a", outcome="ERROR: x", trigger="error"))
        wait_for(
            lambda: Job.objects.filter(state="succeeded", task__startswith=f"{tag} ").count() >= n,
            timeout=900,
            interval=0.1,
            what="jobs",
        )
        return n / (time.perf_counter() - t0)
    finally:
        for worker in workers:
            worker.stop()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    bench_queue_env.reset_queue()
    settings.EMBEDDING_PROVIDER = "none"
    fake = FakeOpenAIServer().start()
    counter = iter(range(10**9))
    fake.responder = lambda payload: Reply(text=distinct_lesson(next(counter) + random.randrange(10**6)))
    settings.LLM_BASE_URL, settings.LLM_MODEL = fake.url, fake.model
    try:
        one = run(["scale-a"], n, concurrency, fake, "one")
        two = run(["scale-a", "scale-b"], n, concurrency, fake, "two")
    finally:
        fake.stop()
    print(f"{n} distinct lesson jobs, {concurrency} worker process(es) per node, one database and broker")
    print(f"1 node : {one:6.1f} jobs/s")
    print(f"2 nodes: {two:6.1f} jobs/s")
    print(f"ratio 2 nodes / 1 node: {two / one:.2f}")
    bench_queue_env.reset_queue()
    purge_broker()


if __name__ == "__main__":
    main()
