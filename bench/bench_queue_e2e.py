"""End-to-end lesson jobs/s through a real worker (fake LLM answering at once) next to a bare no-op Celery
task on the same broker and worker settings.

    .venv/bin/python bench/bench_queue_e2e.py [N] [CONCURRENCY]
"""

from __future__ import annotations

import sys
import time

import bench_queue_env

from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.support.processes import CeleryWorker
from tests.support.wait import wait_for

LESSON = "<situation>s {n}</situation><mistake>m</mistake><correction>c</correction><tags>a, b</tags>"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    bench_queue_env.reset_queue()
    from django.conf import settings

    fake = FakeOpenAIServer().start()
    counter = iter(range(10**9))
    fake.responder = lambda payload: Reply(text=LESSON.format(n=next(counter)))
    settings.LLM_BASE_URL, settings.LLM_MODEL = fake.url, fake.model
    queue = settings.LESSONQ_QUEUE
    worker = CeleryWorker(
        queues=[queue],
        concurrency=concurrency,
        hostname="bench@%h",
        env=bench_queue_env.env(LESSONBOARD_LLM_BASE_URL=fake.url, LESSONBOARD_LLM_MODEL=fake.model),
    ).wait_ready()
    try:
        # 1. bare no-op tasks (celery.accumulate returns its argument), counted from the worker log
        from lessonboard.celery import app

        t0 = time.perf_counter()
        for i in range(n):
            app.send_task("celery.accumulate", args=[i], queue=queue)
        wait_for(lambda: worker.log().count("celery.accumulate[") >= 2 * n, timeout=600, interval=0.05, what="no-ops")
        noop = time.perf_counter() - t0
        # 2. lesson jobs: enqueue (WAL + row + publish) to succeeded (LLM call, lesson persisted, WAL ack)
        settings.LESSONQ_CAPACITY = 10**6
        t0 = time.perf_counter()
        for i in range(n):
            enqueue(LessonRequest(task=f"bench task {i}", attempt="a", outcome="ERROR: x", trigger="error"))
        accepted = time.perf_counter() - t0
        wait_for(lambda: Job.objects.filter(state="succeeded").count() >= n, timeout=900, interval=0.1, what="jobs")
        jobs = time.perf_counter() - t0
    finally:
        worker.stop()
        fake.stop()
    print(f"worker concurrency {concurrency}, filesystem broker, {n} messages each")
    print(f"no-op Celery task : {n / noop:8.1f} tasks/s")
    print(f"lesson jobs e2e   : {n / jobs:8.1f} jobs/s   (enqueue alone: {n / accepted:.1f}/s in the producer)")
    bench_queue_env.reset_queue()


if __name__ == "__main__":
    main()
