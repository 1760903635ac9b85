"""Which embedded broker: a flood of messages from many producer processes into real Celery workers.

    .venv/bin/python bench/bench_broker.py [--messages 20000] [--producers 8] [--consumers 2]
                                           [--only filesystem,atomicfs,sqlalchemy,redis]

Each transport gets a fresh folder/database/server and at most ``--budget`` seconds; what is still queued
then is reported as such, apart from what is lost. ``--consumers`` Celery workers (solo pool, the
project's acks_late + prefetch 1) run a task that records its message number; ``--producers`` processes
publish ``--messages`` in all, as fast as they can. Printed per transport: messages lost (never run),
duplicates, decode errors (worker logs and messages set aside), worker crashes (a worker that exited or
logged "Unrecoverable error"), throughput from the first publish to the last message run, and its ratio
to kombu's filesystem transport (what lessonboard used until now), measured in the same run.

Candidates: ``filesystem`` (kombu's, the anchor), ``atomicfs`` (lessonboard/broker.py), ``sqlalchemy``
(kombu's SQLAlchemy transport on the embedded PostgreSQL; needs SQLAlchemy installed, skipped otherwise),
``redis`` (the Debian package's redis-server on a Unix socket, append-only file on; skipped when absent).
This module is also the Celery app the workers load (``-A bench_broker``).
"""

from __future__ import annotations

import abc
import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from celery import Celery

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import lessonboard.broker  # noqa: E402,F401  (registers atomicfs://)

app = Celery("bench_broker")
app.conf.update(
    broker_url=os.environ.get("BENCH_BROKER_URL", "memory://"),
    broker_transport_options=json.loads(os.environ.get("BENCH_TRANSPORT_OPTIONS", "{}")),
    broker_connection_retry_on_startup=True,
    task_serializer="json",
    accept_content=["json"],
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    task_default_queue="default",
    worker_hijack_root_logger=False,
)
_out: list[int] = []


@app.task(name="bench.record")
def record(number: int) -> None:
    if not _out:
        path = Path(os.environ["BENCH_OUT"]) / f"{os.getpid()}.ids"
        _out.append(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
    os.write(_out[0], f"{number}\n".encode())


# --- the transports ------------------------------------------------------------------------------------
class Candidate(abc.ABC):
    name = ""
    label = ""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch

    def available(self) -> str | None:
        return None

    @abc.abstractmethod
    def start(self) -> tuple[str, dict[str, Any]]:
        """Bring the transport up: its broker URL and extra environment for the worker processes."""

    def set_aside(self) -> int:
        return 0

    def stop(self) -> None:  # noqa: B027 - an optional hook: most candidates have nothing to stop
        pass


class Folder(Candidate):
    def start(self) -> tuple[str, dict[str, Any]]:
        queue = self.scratch / "queue"
        (self.scratch / "control").mkdir(parents=True)
        queue.mkdir()
        options = {
            "data_folder_in": str(queue),
            "data_folder_out": str(queue),
            "control_folder": str(self.scratch / "control"),
            "polling_interval": 0.1,
        }
        return f"{self.name}://", options


class KombuFilesystem(Folder):
    name = "filesystem"
    label = "kombu filesystem (today's)"


class AtomicFilesystem(Folder):
    name = "atomicfs"
    label = "atomicfs (lessonboard/broker.py)"

    def set_aside(self) -> int:
        bad = self.scratch / "queue" / ".bad"
        return len(list(bad.iterdir())) if bad.exists() else 0


class SqlAlchemy(Candidate):
    name = "sqlalchemy"
    label = "kombu SQLAlchemy on embedded PostgreSQL"

    def available(self) -> str | None:
        try:
            import sqlalchemy  # noqa: F401
        except ImportError:
            return "SQLAlchemy is not installed"
        return None

    def start(self) -> tuple[str, dict[str, Any]]:
        from lessonboard import embedded

        self.pgdata = self.scratch / "pgdata"
        embedded.start(self.pgdata)
        embedded.ensure_database(self.pgdata, "broker")
        # kombu hands every transport option to create_engine(): the poll interval goes in the URL's query.
        host = embedded.socket_dir(self.pgdata)
        return f"sqla+postgresql+psycopg://postgres@/broker?host={host}", {}

    def stop(self) -> None:
        from lessonboard import embedded

        embedded.stop(self.pgdata)


class Redis(Candidate):
    name = "redis"
    label = "redis-server (Debian package), AOF everysec"

    def available(self) -> str | None:
        return None if shutil.which("redis-server") else "redis-server is not installed"

    def start(self) -> tuple[str, dict[str, Any]]:
        sock = self.scratch / "redis.sock"
        cmd = ["redis-server", "--port", "0", "--unixsocket", str(sock), "--dir", str(self.scratch)]
        cmd += ["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not sock.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            threading.Event().wait(0.05)
        return f"redis+socket://{sock}", {}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


CANDIDATES: dict[str, type[Candidate]] = {c.name: c for c in (KombuFilesystem, AtomicFilesystem, SqlAlchemy, Redis)}


# --- one run -------------------------------------------------------------------------------------------
def produce(url: str, options: dict[str, Any], numbers: list[int], start_line: Any) -> None:
    app.conf.broker_url = url
    app.conf.broker_transport_options = options
    with app.connection_for_write(url) as conn, app.amqp.Producer(conn) as producer:
        conn.ensure_connection()
        start_line.wait()
        for number in numbers:
            record.apply_async(args=[number], producer=producer)


def read_ids(out: Path) -> list[int]:
    ids: list[int] = []
    for path in out.glob("*.ids"):
        ids += [int(line) for line in path.read_text().split()]
    return ids


def run(candidate: Candidate, messages: int, producers: int, consumers: int, budget: float) -> dict[str, Any]:
    url, options = candidate.start()
    out = candidate.scratch / "out"
    out.mkdir()
    env = dict(
        os.environ,
        BENCH_BROKER_URL=url,
        BENCH_TRANSPORT_OPTIONS=json.dumps(options),
        BENCH_OUT=str(out),
        PYTHONPATH=f"{ROOT / 'bench'}{os.pathsep}{ROOT}",
    )
    workers = []
    for n in range(consumers):
        log = (candidate.scratch / f"worker{n}.log").open("wb")
        cmd = [sys.executable, "-m", "celery", "-A", "bench_broker", "worker", "--pool", "solo", "--loglevel"]
        cmd += ["WARNING", "--hostname", f"w{n}@bench", "--without-gossip", "--without-mingle"]
        cmd += ["--without-heartbeat", "--queues", "default"]
        workers.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    # Warm up: one message through, so every worker is consuming before the clock starts.
    app.conf.broker_url = url
    app.conf.broker_transport_options = options
    with app.connection_for_write(url) as conn:
        record.apply_async(args=[-1], connection=conn)
    deadline = time.monotonic() + 60
    while -1 not in read_ids(out):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{candidate.name}: workers did not start; see {candidate.scratch}")
        threading.Event().wait(0.05)

    ctx = multiprocessing.get_context("spawn")  # no connection inherited from the warm-up
    start_line = ctx.Barrier(producers + 1)
    chunks = [list(range(i, messages, producers)) for i in range(producers)]
    procs = [ctx.Process(target=produce, args=(url, options, chunk, start_line)) for chunk in chunks]
    for proc in procs:
        proc.start()
    start_line.wait()  # every producer started and connected: start the clock
    started = time.monotonic()
    seen, last_progress = 0, time.monotonic()
    while True:
        count = len(read_ids(out)) - 1
        if count >= messages:
            break
        if count != seen:
            seen, last_progress = count, time.monotonic()
        if time.monotonic() - last_progress > 20:  # no progress for 20 s: lost, or every worker crashed
            break
        if time.monotonic() - started > budget:  # what is still queued then is counted as left, not lost
            break
        threading.Event().wait(0.1)
    elapsed = time.monotonic() - started
    for proc in procs:
        proc.join(timeout=60)
    crashed = sum(1 for worker, _ in workers if worker.poll() is not None)
    for worker, log in workers:
        if worker.poll() is None:
            worker.terminate()
            worker.wait(timeout=30)
        log.close()
    logs = "".join(p.read_text(errors="replace") for p in candidate.scratch.glob("worker*.log"))
    with app.connection_for_write(url) as conn:
        left = int(conn.default_channel._size("default"))
    candidate.stop()
    ids = [i for i in read_ids(out) if i >= 0]
    unique = set(ids)
    return {
        "run": len(unique),
        "left": left,
        "lost": messages - len(unique) - left,
        "duplicates": len(ids) - len(unique),
        "decode_errors": logs.count("JSONDecodeError") + candidate.set_aside(),
        "crashes": max(crashed, logs.count("Unrecoverable error")),
        "seconds": elapsed,
        "rate": len(unique) / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--only", default=",".join(CANDIDATES))
    parser.add_argument("--budget", type=float, default=180, help="seconds per transport before stopping")
    args = parser.parse_args()
    names = ["filesystem"] + [n for n in args.only.split(",") if n != "filesystem"]  # the anchor first
    print(
        f"{args.messages} messages from {args.producers} producer processes, {args.consumers} Celery workers "
        f"(solo pool, acks_late, prefetch 1); {os.cpu_count()} CPUs; at most {args.budget:.0f} s each"
    )
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"bench-broker-{name}-") as scratch:
            candidate = CANDIDATES[name](Path(scratch))
            missing = candidate.available()
            if missing:
                print(f"{candidate.label:48} skipped: {missing}")
                continue
            r = results[name] = run(candidate, args.messages, args.producers, args.consumers, args.budget)
            anchor = results["filesystem"]["rate"]
            print(
                f"{candidate.label:44} run {r['run']:5}  still queued {r['left']:5}  lost {r['lost']:4}  "
                f"duplicates {r['duplicates']:3}  decode errors {r['decode_errors']:3}  worker crashes "
                f"{r['crashes']}  {r['rate']:6.1f} msgs/s ({r['seconds']:.0f} s)  x{r['rate'] / anchor:.2f} vs today's",
                flush=True,
            )


if __name__ == "__main__":
    main()
