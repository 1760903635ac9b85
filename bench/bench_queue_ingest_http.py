"""HTTP ingest through gunicorn: lessonboard's ``POST /api/v1/reflexion/triggers`` next to its anchor, a
bare Django view doing only the same durable WAL append (``bench_ingest_bare.py``), both served by one
gunicorn (same workers, same middleware), in interleaved rounds; medians of the rounds and the ratio.

    .venv/bin/python bench/bench_queue_ingest_http.py [N per round] [CLIENT_THREADS] [ROUNDS]

Each request is a distinct trigger. lessonboard's side does all its work: token check, WAL append
(fsync), the row, capacity accounting and the message owed in the outbox (an LLM is configured). The
node's dispatcher, which sends the owed messages to the broker, runs beside gunicorn as in production
(there a thread of the lesson worker, here a process of its own), so its CPU is spent on the same
machine during the rounds; after each lessonboard round the script waits until it has sent them all
and prints how long that took after the last answer. No worker consumes; the messages are dropped
afterwards.

Each round also prints the CPU time spent per request (Linux: user + system time from ``/proc``) by
the gunicorn processes, the dispatcher, the PostgreSQL server and this client. On a machine shared with
other work the requests/s move with everyone else's load; the CPU per request moves much less, and its
total (bare / lessonboard) is the ratio the two reach when the machine's CPU is what limits them.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import bench_queue_env

from lessonboard.tokens import issue_token
from lessonq.models import Outbox
from tests.support.processes import ROOT, Gunicorn, purge_broker
from tests.support.wait import wait_for

BENCH_DIR = Path(__file__).resolve().parent
BARE = "/api/bench/bare-append"
APP = "/api/v1/reflexion/triggers"
DISPATCHER = "import django; django.setup()\nfrom lessonq.outbox import Dispatcher\nDispatcher().run()\n"


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    return [int(c) for t in tasks for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]


def cpu_snapshot(server: Gunicorn, dispatcher: subprocess.Popen[bytes]) -> dict[str, float]:
    """CPU seconds so far of the web processes, the dispatcher, the PostgreSQL server and this client."""
    postmaster = int((bench_queue_env.bench_env.PGDATA / "postmaster.pid").read_text().split()[0])
    web = [server.proc.pid, *_children(server.proc.pid)]
    return {
        "web": sum(_cpu_seconds(p) for p in web),
        "dispatcher": _cpu_seconds(dispatcher.pid),
        "postgres": sum(_cpu_seconds(p) for p in [postmaster, *_children(postmaster)]),
        "client": time.process_time(),
    }


def outbox_drained() -> float:
    """Seconds until the dispatcher has sent every owed message."""
    t0 = time.perf_counter()
    wait_for(lambda: not Outbox.objects.exists(), timeout=120, interval=0.01, what="the outbox sent")
    return time.perf_counter() - t0


def run_round(port: int, path: str, token: str, tag: str, n: int, threads: int) -> tuple[float, float, dict[int, int]]:
    """``(requests/s, p50 ms, statuses)`` of ``n`` distinct triggers posted by ``threads`` clients."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    counter = iter(range(n))

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            body = json.dumps({"task": f"bench {tag} {i}", "output": "out " * 100, "error": "boom", "agent": "bench"})
            t0 = time.perf_counter()
            conn.request(
                "POST",
                path,
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

    t0 = time.perf_counter()
    pool = [threading.Thread(target=client) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    total = time.perf_counter() - t0
    return n / total, bench_queue_env.percentile(latencies, 50) * 1000, statuses


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    bench_queue_env.reset_queue()
    token = issue_token("bench", ["ingest"]).plaintext
    env = bench_queue_env.env(
        DJANGO_SETTINGS_MODULE="bench_ingest_settings",
        PYTHONPATH=os.pathsep.join([str(BENCH_DIR), str(BENCH_DIR.parent)]),
        LESSONBOARD_LLM_BASE_URL="http://127.0.0.1:9/v1",  # configured, never called: the publish path runs
        LESSONBOARD_LLM_MODEL="bench",
        LESSONQ_CAPACITY=str(n * rounds + 100),
    )
    server = Gunicorn(env=env, workers=2).wait_ready()
    dispatcher = subprocess.Popen([sys.executable, "-c", DISPATCHER], cwd=ROOT, env=env)
    figures: dict[str, list[tuple[float, float]]] = {BARE: [], APP: []}
    cpu: dict[str, list[float]] = {BARE: [], APP: []}  # ms of CPU per request, all processes
    try:
        for path in (BARE, APP):  # warm both (imports, connections)
            run_round(server.port, path, token, f"warm{path}", 50, threads)
        outbox_drained()
        for r in range(rounds):
            for path in (BARE, APP):
                before = cpu_snapshot(server, dispatcher)
                rate, p50, statuses = run_round(server.port, path, token, f"{r}{path}", n, threads)
                assert set(statuses) == {202}, statuses
                figures[path].append((rate, p50))
                sent = (
                    f", all messages sent {outbox_drained() * 1000:.0f} ms after the last answer" if path == APP else ""
                )
                after = cpu_snapshot(server, dispatcher)
                spent = {k: (after[k] - before[k]) * 1000 / n for k in before}
                cpu[path].append(sum(spent.values()))
                print(
                    f"round {r + 1} {'bare append' if path == BARE else 'lessonboard'}: {rate:.0f} req/s, p50 {p50:.1f} ms{sent}"
                    f"; CPU ms per request: {', '.join(f'{k} {v:.2f}' for k, v in spent.items())}"
                    f" (load average {os.getloadavg()[0]:.1f})"
                )
    finally:
        dispatcher.terminate()
        dispatcher.wait(timeout=30)
        server.stop()
    med = {
        path: (statistics.median(r for r, _ in f), statistics.median(p for _, p in f)) for path, f in figures.items()
    }
    print(f"gunicorn 2 workers, {threads} client threads, {rounds} rounds x {n} distinct triggers each, medians:")
    print(f"lessonboard ingest       : {med[APP][0]:.0f} req/s, p50 {med[APP][1]:.1f} ms")
    print(f"bare durable-append view : {med[BARE][0]:.0f} req/s, p50 {med[BARE][1]:.1f} ms")
    print(f"ratio lessonboard / bare : {med[APP][0] / med[BARE][0]:.2f}")
    app_cpu, bare_cpu = statistics.median(cpu[APP]), statistics.median(cpu[BARE])
    print(f"CPU per request, all processes: lessonboard {app_cpu:.2f} ms, bare {bare_cpu:.2f} ms")
    print(f"CPU ratio bare / lessonboard : {bare_cpu / app_cpu:.2f}")
    bench_queue_env.reset_queue()
    purge_broker()


if __name__ == "__main__":
    main()
