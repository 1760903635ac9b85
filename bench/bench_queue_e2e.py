"""End-to-end lesson jobs/s through a real worker (fake LLM answering at once) next to a bare no-op Celery
task on the same broker and worker settings.

    .venv/bin/python bench/bench_queue_e2e.py [N] [CONCURRENCY] [local|fake]

Every job yields a *distinct* lesson (its own words, so no fact-id or near-duplicate match reinforces
an earlier one), and a job counts as done when its lesson has its vector: the worker consumes the
node's lesson queue and ``embed``, so the embedding work (the configured provider, local by default)
is inside the figure. ``fake`` (third argument) has the vectors computed by the fake OpenAI server
instead (``LESSONBOARD_EMBEDDING_PROVIDER=openai`` pointed at it: an instant, deterministic 384-dimension
vector), which leaves the queue's own cost: the embed messages and tasks, the vector UPDATEs.
"""

from __future__ import annotations

import random
import sys
import time

import bench_queue_env

from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job
from lessons.models import Lesson
from tests.fakes.openai_server import FakeOpenAIServer, Reply, hashed_embedding
from tests.support.processes import CeleryWorker
from tests.support.wait import wait_for

LESSON = "<situation>{a}</situation><mistake>{b}</mistake><correction>{c}</correction><tags>{t}</tags>"
WORDS = (
    "edit large file timeout retry backoff rate limit migration column index lock git rebase conflict markers "
    "dependency pin version flaky test poll path relative workspace docker cache build deploy secret token "
    "encoding csv json yaml schema parser error exception worker queue socket proxy header cookie session "
    "tenant shard replica vacuum bloat checksum archive compress stream buffer thread fork signal daemon "
    "cron quota budget latency throughput pagination cursor offset keyset locale timezone unicode emoji"
).split()


def distinct_lesson(n: int) -> str:
    rng = random.Random(n)
    words = lambda k: " ".join(rng.sample(WORDS, k))  # noqa: E731
    return LESSON.format(
        a=f"{words(8)} case {n}", b=f"{words(7)} slip {n}", c=f"{words(9)} fix {n}", t=f"{words(1)}, {words(1)}"
    )


WARM_UP = 10


def run_noops(worker: CeleryWorker, queue: str, n: int) -> float:
    """Seconds for ``n`` no-op tasks, from the first send to the last one's log line."""
    from lessonboard.celery import app

    done = worker.log().count("celery.accumulate[")
    t0 = time.perf_counter()
    for i in range(n):
        app.send_task("celery.accumulate", args=[i], queue=queue)
    wait_for(
        lambda: worker.log().count("celery.accumulate[") >= done + 2 * n, timeout=600, interval=0.02, what="no-ops"
    )
    return time.perf_counter() - t0


def run_jobs(tag: str, n: int) -> tuple[float, float, float]:
    """Seconds for ``n`` distinct lesson jobs: until all have their lesson's vector, until all succeeded,
    and for the enqueues alone."""
    succeeded = Job.objects.filter(state="succeeded").count()
    embedded = Lesson.objects.filter(source_job_id__isnull=False, embedded_at__isnull=False).count()
    t0 = time.perf_counter()
    for i in range(n):
        enqueue(LessonRequest(task=f"{tag} task {i}", attempt="a", outcome="ERROR: x", trigger="error"))
    accepted = time.perf_counter() - t0
    wait_for(
        lambda: Job.objects.filter(state="succeeded").count() >= succeeded + n, timeout=900, interval=0.02, what="jobs"
    )
    done = time.perf_counter() - t0
    wait_for(
        lambda: Lesson.objects.filter(source_job_id__isnull=False, embedded_at__isnull=False).count() >= embedded + n,
        timeout=900,
        interval=0.02,
        what="lesson vectors",
    )
    return time.perf_counter() - t0, done, accepted


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    concurrency = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    embedder = sys.argv[3] if len(sys.argv) > 3 else "local"
    bench_queue_env.reset_queue()
    from django.conf import settings

    fake = FakeOpenAIServer().start()
    counter = iter(range(10**9))
    fake.responder = lambda payload: Reply(text=distinct_lesson(next(counter)))
    settings.LLM_BASE_URL, settings.LLM_MODEL = fake.url, fake.model
    settings.LESSONQ_CAPACITY = 10**6
    queue = settings.LESSONQ_QUEUE
    worker_env = {"LESSONBOARD_LLM_BASE_URL": fake.url, "LESSONBOARD_LLM_MODEL": fake.model}
    if embedder == "fake":
        dimensions = settings.EMBEDDING_DIMENSIONS
        fake.embedding_fn = lambda text: hashed_embedding(text, dimensions)
        # the worker's column size stays this process's (the local model's): the openai provider's
        # default (384) would refuse the fake's vectors
        worker_env["LESSONBOARD_EMBEDDING_PROVIDER"] = "openai"
        worker_env["LESSONBOARD_EMBEDDING_DIMENSIONS"] = str(dimensions)
    worker = CeleryWorker(
        queues=[queue, "embed"], concurrency=concurrency, hostname="bench@%h", env=bench_queue_env.env(**worker_env)
    ).wait_ready()
    try:
        # Warm-up, not counted: the pool's children start, import, connect and load the embedding model.
        run_noops(worker, queue, WARM_UP)
        run_jobs("warm", WARM_UP)
        # 1. bare no-op tasks (celery.accumulate returns its argument), counted from the worker log
        noop = run_noops(worker, queue, n)
        # 2. lesson jobs: enqueue (WAL + row + publish) to succeeded (LLM call, lesson persisted, WAL
        # ack), then to every lesson's vector
        jobs, succeeded, accepted = run_jobs("bench", n)
        lessons = Lesson.objects.filter(source_job_id__isnull=False).count() - WARM_UP
    finally:
        worker.stop()
        fake.stop()
    embeddings = "fake server (instant)" if embedder == "fake" else f"{settings.EMBEDDING_PROVIDER} provider"
    print(f"worker concurrency {concurrency}, filesystem broker, {n} messages each, embeddings: {embeddings}")
    print(f"no-op Celery task : {n / noop:8.1f} tasks/s")
    print(
        f"lesson jobs e2e   : {n / jobs:8.1f} jobs/s   ({lessons} distinct lessons, each with its vector; "
        f"jobs succeeded at {n / succeeded:.1f}/s; enqueue alone {n / accepted:.1f}/s in the producer)"
    )
    print(f"ratio lesson jobs / no-op tasks: {noop / jobs:.2f}")
    bench_queue_env.reset_queue()


if __name__ == "__main__":
    main()
