"""HTTP ingest through gunicorn: requests/s and latency percentiles for POST /api/v1/reflexion/triggers.

    .venv/bin/python bench/bench_queue_ingest_http.py [N] [CLIENT_THREADS]

Each request is a distinct trigger (a new WAL record with fsync, a row, no LLM configured so nothing is
published): what an agent fleet costs the web tier.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time

import bench_queue_env

from lessonboard.tokens import issue_token
from tests.support.processes import Gunicorn


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    bench_queue_env.reset_queue()
    token = issue_token("bench", ["ingest"]).plaintext
    server = Gunicorn(env=bench_queue_env.env(), workers=2).wait_ready()
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    counter = iter(range(n))

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            body = json.dumps({"task": f"bench {i}", "output": "out " * 100, "error": "boom", "agent": "bench"})
            t0 = time.perf_counter()
            conn.request(
                "POST",
                "/api/v1/reflexion/triggers",
                body=body,
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            response = conn.getresponse()
            response.read()
            elapsed = time.perf_counter() - t0
            with lock:
                latencies.append(elapsed)
                statuses[response.status] = statuses.get(response.status, 0) + 1
        conn.close()

    try:
        t0 = time.perf_counter()
        pool = [threading.Thread(target=client) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        total = time.perf_counter() - t0
    finally:
        server.stop()
    ordered = sorted(latencies)
    p = lambda q: ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000  # noqa: E731
    print(f"gunicorn 2 workers, {threads} client threads, {n} requests, statuses {statuses}")
    print(f"{n / total:.1f} requests/s   p50 {p(0.5):.1f} ms   p99 {p(0.99):.1f} ms   max {ordered[-1] * 1000:.1f} ms")
    bench_queue_env.reset_queue()


if __name__ == "__main__":
    main()
