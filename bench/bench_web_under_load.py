"""The web never waits on the LLM: /healthz and the queue page latency through a real gunicorn while
clients hold slow requests, against /healthz at rest in the same run (the anchor).

    .venv/bin/python bench/bench_web_under_load.py [--worker-class sync|gthread] [TRIGGERS]

Phases, each with a /healthz sampler (and a queue-page sampler in the flood) running beside the load:
1. rest: /healthz alone (the anchor);
2. refine waits: 8 clients loop POST /api/v1/refine, whose run cannot finish (no worker consumes the
   llm queue), so every request waits up to LESSONBOARD_REFINE_API_WAIT (or answers 202 at once when
   LESSONBOARD_REFINE_API_MAX_WAITERS requests already wait in that web process);
3. flood: 8 clients send TRIGGERS (2,000) distinct triggers to POST /api/v1/reflexion/triggers.
Bars (docs/operations.md#web-under-load): /healthz p95 <= 50 ms in phases 2 and 3, queue page p95 <= 300 ms.
``--worker-class sync`` runs the same against gunicorn's sync workers (what lessonboard used before).
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time
from collections.abc import Callable

import bench_queue_env
from django.conf import settings
from django.test import Client

from lessonboard.tokens import issue_token
from tests.factories import UserFactory
from tests.support.processes import Gunicorn

CLIENTS = 8
DRAFT = "Deploy the service: build the image, push it, run helm upgrade with the new tag, then watch the pods. " * 4
_tick = threading.Event()  # never set: a pause between samples


class Sampler:
    """GET ``path`` every ``interval`` seconds until stopped; keeps the latencies (ms)."""

    def __init__(self, port: int, path: str, *, cookie: str = "", interval: float = 0.02) -> None:
        self.port, self.path, self.cookie, self.interval = port, path, cookie, interval
        self.latencies: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            t0 = time.perf_counter()
            try:
                conn.request("GET", self.path, headers={"Cookie": self.cookie} if self.cookie else {})
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    self.errors += 1
            except OSError:
                self.errors += 1
            self.latencies.append((time.perf_counter() - t0) * 1000)
            conn.close()
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> str:
        p50 = bench_queue_env.percentile(self.latencies, 50)
        p95 = bench_queue_env.percentile(self.latencies, 95)
        return f"p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  max {max(self.latencies):7.1f} ms  n={len(self.latencies)} errors={self.errors}"

    @property
    def p95(self) -> float:
        return bench_queue_env.percentile(self.latencies, 95)


def clients(work: Callable[[int], bool], n: int = CLIENTS) -> float:
    """Run ``work(client_number)`` in ``n`` threads until it returns False; the wall time."""

    def loop(i: int) -> None:
        while work(i):
            pass

    t0 = time.perf_counter()
    pool = [threading.Thread(target=loop, args=(i,)) for i in range(n)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - t0


def post(port: int, path: str, body: dict[str, object], token: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(
        "POST",
        path,
        body=json.dumps(body),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.status


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker-class", default="gthread", choices=("gthread", "sync"))
    parser.add_argument("triggers", nargs="?", type=int, default=2000)
    args = parser.parse_args()
    bench_queue_env.reset_queue()
    token = issue_token("bench-web", ["full"]).plaintext
    user = UserFactory(username=f"bench-web-{time.monotonic_ns()}", role="operator")
    browser = Client()
    browser.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
    env = bench_queue_env.env(LESSONBOARD_REFINE_ENABLED="true", LESSONBOARD_REFINE_API_WAIT="5s")
    # The command line wins over lessonboard/gunicorn_conf.py (gthread): --worker-class sync is the "before".
    # (gunicorn turns "sync" with threads > 1 into gthread, hence --threads 1 for the real sync worker.)
    extra = ["--worker-class", args.worker_class] + (["--threads", "1"] if args.worker_class == "sync" else [])
    server = Gunicorn(env=env, workers=2, extra=extra).wait_ready()
    try:
        with Sampler(server.port, "/healthz") as rest:
            _tick.wait(5)
        print(f"gunicorn 2 workers, --worker-class {args.worker_class}; {CLIENTS} clients per phase")
        print(f"1. /healthz at rest (anchor)         {rest.summary()}")

        deadline = time.monotonic() + 15
        statuses: dict[int, int] = {}
        lock = threading.Lock()

        def refine(i: int) -> bool:
            status = post(
                server.port, "/api/v1/refine", {"task": "deploy", "draft": DRAFT, "agent": f"bench{i}"}, token
            )
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
            return time.monotonic() < deadline

        with Sampler(server.port, "/healthz") as held:
            clients(refine)
        print(f"2. /healthz, 8 clients in refine waits {held.summary()}   refine statuses {statuses}")

        counter = iter(range(args.triggers))
        flood_statuses: dict[int, int] = {}

        def trigger(i: int) -> bool:
            with lock:
                n = next(counter, None)
            if n is None:
                return False
            body = {"task": f"flood {n}", "output": "out " * 100, "error": "boom", "agent": "bench"}
            status = post(server.port, "/api/v1/reflexion/triggers", body, token)
            with lock:
                flood_statuses[status] = flood_statuses.get(status, 0) + 1
            return True

        with (
            Sampler(server.port, "/healthz") as health,
            Sampler(server.port, "/queue/?tab=pending", cookie=cookie, interval=0.1) as page,
        ):
            wall = clients(trigger)
        print(f"3. /healthz, {args.triggers}-trigger flood    {health.summary()}")
        print(f"   queue page during the flood       {page.summary()}")
        print(f"   flood: {args.triggers / wall:.0f} triggers/s, statuses {flood_statuses}")
    finally:
        server.stop()
    anchor = rest.p95
    print(
        f"ratios to /healthz at rest p95 ({anchor:.1f} ms): refine waits {held.p95 / anchor:.1f}x, flood {health.p95 / anchor:.1f}x"
    )
    ok = held.p95 <= 50 and health.p95 <= 50 and page.p95 <= 300
    print("bars (/healthz p95 <= 50 ms under both loads, queue page p95 <= 300 ms):", "met" if ok else "NOT met")
    bench_queue_env.reset_queue()


if __name__ == "__main__":
    main()
