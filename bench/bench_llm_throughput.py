"""Lessons/s end to end against a fake LLM that takes LATENCY seconds per answer, with the LLM worker as
`serve` starts it (``--pool threads``, LESSONBOARD_LLM_WORKER_THREADS) next to its anchor, today's one
prefork worker of LESSONQ_WORKERS (2) processes; /healthz p95 from gunicorn meanwhile.

    .venv/bin/python bench/bench_llm_throughput.py [N] [LATENCY] [THREADS] [modes: threads,prefork] [ANCHOR_N]
    .venv/bin/python bench/bench_llm_throughput.py 500 5 16 threads,prefork 40   # the 500 × 5 s run

ANCHOR_N (default N) is how many triggers the prefork anchor gets: at 5 s an answer its 2 slots would take
N × 5 / 2 s, so the long run gives it fewer and compares lessons/s. Each mode also prints the worker's CPU
seconds per lesson (its processes' user + system time over the timed part, from /proc): what a lesson
costs beyond the wait for the answer.

Every trigger is a distinct task and yields a distinct lesson. The fake counts the calls in flight; the
script samples them every 20 ms and prints the most and the mean while jobs ran, beside the physical
limit of the run: N × latency / calls in flight (no worker can do better than keep every slot busy).
"""

from __future__ import annotations

import random
import statistics
import sys
import threading
import time
import urllib.request

import bench_queue_env
import psutil

from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.support.processes import CeleryWorker, Gunicorn
from tests.support.wait import wait_for

LESSON = "<situation>{a}</situation><mistake>{b}</mistake><correction>{c}</correction><tags>{t}</tags>"
WORDS = (
    "edit large file timeout retry backoff rate limit migration column index lock git rebase conflict markers "
    "dependency pin version flaky test poll path relative workspace docker cache build deploy secret token "
    "encoding csv json yaml schema parser error exception worker queue socket proxy header cookie session"
).split()


def distinct_lesson(n: int) -> str:
    rng = random.Random(n)
    words = lambda k: " ".join(rng.sample(WORDS, k))  # noqa: E731
    return LESSON.format(a=f"{words(7)} case {n}", b=f"{words(6)} slip {n}", c=f"{words(8)} fix {n}", t="bench, llm")


class Sampler(threading.Thread):
    """Calls in flight at the fake every 20 ms, and /healthz latencies every 50 ms, until stopped."""

    def __init__(self, fake: FakeOpenAIServer, health_url: str) -> None:
        super().__init__(daemon=True)
        self.fake, self.health_url = fake, health_url
        self.in_flight: list[int] = []
        self.health_ms: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        next_health = 0.0
        while not self.stopped.wait(0.02):
            self.in_flight.append(self.fake.in_flight)
            now = time.monotonic()
            if now >= next_health:
                next_health = now + 0.05
                t0 = time.perf_counter()
                try:
                    with urllib.request.urlopen(self.health_url, timeout=5) as response:
                        response.read()
                    self.health_ms.append((time.perf_counter() - t0) * 1000)
                except OSError:
                    self.health_ms.append(5000.0)


def worker_cpu(pid: int) -> float:
    """User + system CPU seconds of a worker process and its children (prefork's pool) so far."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def run(mode: str, n: int, latency: float, threads: int, fake: FakeOpenAIServer, web: Gunicorn) -> dict[str, float]:
    from django.conf import settings

    bench_queue_env.reset_queue()
    queue = settings.LESSONQ_QUEUE
    worker_env = bench_queue_env.env(
        LESSONBOARD_LLM_BASE_URL=fake.url,
        LESSONBOARD_LLM_MODEL=fake.model,
        LESSONBOARD_LLM_TIMEOUT="60s",
        LESSONQ_CAPACITY=str(10**6),
    )
    if mode == "threads":
        worker = CeleryWorker(queues=[queue, "llm"], concurrency=threads, pool="threads", env=worker_env)
    else:
        worker = CeleryWorker(
            queues=[queue, "llm"], concurrency=settings.LESSONQ_WORKERS, pool="prefork", env=worker_env
        )
    worker.wait_ready()
    try:
        fake.latency = 0.0
        warm = [
            enqueue(LessonRequest(task=f"warm {mode} {i}", attempt="a", outcome="ERROR: x", trigger="error")).job_id
            for i in range(4)
        ]
        wait_for(lambda: Job.objects.filter(pk__in=warm, state="succeeded").count() == 4, timeout=120, what="warm-up")
        fake.latency = latency
        fake.max_in_flight = 0
        cpu_before = worker_cpu(worker.pid)
        sampler = Sampler(fake, web.url + "/healthz")
        sampler.start()
        t0 = time.perf_counter()
        ids = [
            enqueue(LessonRequest(task=f"{mode} task {i}", attempt="a", outcome="ERROR: x", trigger="error")).job_id
            for i in range(n)
        ]
        wait_for(
            lambda: Job.objects.filter(pk__in=ids, state="succeeded").count() == n,
            timeout=max(600, n * latency * 2),
            interval=0.05,
            what="jobs",
        )
        elapsed = time.perf_counter() - t0
        cpu = worker_cpu(worker.pid) - cpu_before
        sampler.stopped.set()
        sampler.join()
    finally:
        worker.stop()
    busy = [v for v in sampler.in_flight if v > 0] or [0]
    mean_in_flight = statistics.mean(busy)
    return {
        "n": n,
        "elapsed": elapsed,
        "lessons_per_s": n / elapsed,
        "max_in_flight": fake.max_in_flight,
        "mean_in_flight": mean_in_flight,
        "limit": n * latency / max(fake.max_in_flight, 1),
        "healthz_p95": bench_queue_env.percentile(sampler.health_ms, 95),
        "healthz_n": len(sampler.health_ms),
        "cpu_ms_per_lesson": cpu * 1000 / n,
        "dead": Job.objects.filter(pk__in=ids, state="dead").count(),
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 160
    latency = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    modes = (sys.argv[4] if len(sys.argv) > 4 else "threads,prefork").split(",")
    anchor_n = int(sys.argv[5]) if len(sys.argv) > 5 else n
    from django.conf import settings

    fake = FakeOpenAIServer().start()
    counter = iter(range(10**9))
    lock = threading.Lock()

    def respond(payload: dict[str, object]) -> Reply:
        with lock:
            return Reply(text=distinct_lesson(next(counter)))

    fake.responder = respond
    settings.LLM_BASE_URL, settings.LLM_MODEL = fake.url, fake.model
    settings.LESSONQ_CAPACITY = 10**6
    web = Gunicorn(env=bench_queue_env.env(LESSONBOARD_LLM_BASE_URL=fake.url, LESSONBOARD_LLM_MODEL=fake.model))
    web.wait_ready()
    results = {}
    try:
        for mode in modes:
            results[mode] = run(mode, anchor_n if mode == "prefork" else n, latency, threads, fake, web)
    finally:
        web.stop()
        fake.stop()
    print(f"fake LLM answering in {latency:g} s, LESSONBOARD_LLM_CONCURRENCY {threads}")
    for mode, r in results.items():
        label = f"threads worker ×{threads}" if mode == "threads" else f"prefork worker ×{settings.LESSONQ_WORKERS}"
        print(
            f"{label:22}: {r['n']:.0f} triggers {r['elapsed']:7.1f} s  {r['lessons_per_s']:6.2f} lessons/s  calls in flight max "
            f"{r['max_in_flight']:.0f} mean {r['mean_in_flight']:.1f}  physical limit N×latency/in-flight "
            f"{r['limit']:.1f} s ({r['max_in_flight'] / latency:.1f} lessons/s)  /healthz p95 "
            f"{r['healthz_p95']:.1f} ms over {r['healthz_n']} probes  worker CPU {r['cpu_ms_per_lesson']:.1f} ms/lesson  "
            f"dead {r['dead']}"
        )
    if "threads" in results and "prefork" in results:
        ratio = results["threads"]["lessons_per_s"] / results["prefork"]["lessons_per_s"]
        print(f"threads / prefork anchor (lessons/s, same run): {ratio:.2f}×")


if __name__ == "__main__":
    main()
