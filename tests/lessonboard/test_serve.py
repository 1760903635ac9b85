"""``manage.py serve`` as an operator runs it: real children (gunicorn, Celery worker and beat), real signals.

These runs use the test database (``DATABASE_URL``) and their own data dir, broker folder and metrics; the
embedded PostgreSQL's crash recovery is in test_embedded_restart.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from lessonboard import supervisor
from lessonboard.overview import collect
from tests.support.processes import ROOT, free_port, subprocess_env
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


class Serve:
    """``manage.py serve`` in its own session, as a terminal's foreground job would be."""

    def __init__(self, data_dir: Path, *args: str, **env: str) -> None:
        self.data_dir = data_dir
        (data_dir / "metrics").mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        merged = subprocess_env(
            LESSONBOARD_DATA_DIR=str(data_dir),
            PROMETHEUS_MULTIPROC_DIR=str(data_dir / "metrics"),
            LESSONBOARD_WEB_WORKERS="1",
            LESSONBOARD_WORKER_CONCURRENCY="1",
            LESSONBOARD_DRAIN_TIMEOUT="10",
            **env,
        )
        if env.get("DATABASE_URL") == "":
            merged.pop("DATABASE_URL")
        if "LESSONBOARD_METRICS_ALLOWED_ADDRESSES" not in env:
            merged.pop("LESSONBOARD_METRICS_ALLOWED_ADDRESSES", None)  # as on a newcomer's machine: serve decides
        self.log_path = Path(tempfile.mkstemp(prefix="lb-serve-", suffix=".log")[1])
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(self.port), *args],
            env=merged,
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def child_log(self, name: str) -> str:
        """What a child printed: ``<data dir>/logs/<name>.log`` (without --verbose)."""
        path = self.data_dir / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_up(self, timeout: float = 180) -> Serve:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            return "lessonboard is running at" in self.log()

        wait_for(up, timeout=timeout, interval=0.2, what="serve up")
        return self

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.data_dir / "serve-status.json").read_text())["children"]
        return data

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def wait_exit(self, timeout: float = 90) -> int:
        code = self.proc.wait(timeout=timeout)
        self._log.close()
        return code

    def kill_group(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


@pytest.fixture
def serve_factory(tmp_path: Path):  # type: ignore[no-untyped-def]
    started: list[Serve] = []

    def start(*args: str, **env: str) -> Serve:
        started.append(Serve(tmp_path / "data", *args, **env))
        return started[-1]

    yield start
    for serve in started:
        serve.stop()


def _pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_it_restarts_a_worker_that_died_while_the_web_stays_up_and_readyz_says_degraded(serve_factory) -> None:  # type: ignore[no-untyped-def]
    serve = serve_factory(LESSONBOARD_SERVE_RESTART_BACKOFF="3").wait_up()
    log = serve.log()
    # Start-up ends with how to log in (the first run's password too) and where the logs are; the children's
    # own output is in their log files, not between serve's lines.
    welcome = log[log.index("lessonboard is running at") :]
    assert log.find("Starting web:") < log.find("lessonboard is running at")
    assert "    password: " in welcome and "username: admin" in welcome, welcome
    logs_line = next(line for line in welcome.splitlines() if line.startswith("Logs: "))
    assert logs_line.startswith(f"Logs: {serve.data_dir / 'logs'}/ (") and "serve --verbose" in logs_line
    for name in ("web.log", "worker.log", "llm-worker.log", "beat.log"):  # one file per child
        assert name in logs_line, logs_line
    assert "Booting worker" not in log and "Booting worker" in serve.child_log("web")  # gunicorn's
    wait_for(lambda: "[queues]" in serve.child_log("worker"), timeout=60, what="the worker's banner in worker.log")
    wait_for(lambda: "beat: Starting" in serve.child_log("beat"), timeout=60, what="beat's start in beat.log")
    assert "[queues]" not in serve.log() and "beat: Starting" not in serve.log()
    first = serve.status()
    web_pid, worker_pid = first["web"]["pid"], first["worker"]["pid"]

    os.kill(worker_pid, signal.SIGKILL)

    def degraded() -> str | None:
        code, body = serve.get("/readyz")
        detail = json.loads(body)["checks"]["processes"]["detail"]
        return detail if code == 200 and detail.startswith("degraded: worker down since") else None

    wait_for(degraded, timeout=30, what="/readyz to say the worker is down")
    assert serve.get("/healthz")[0] == 200
    wait_for(
        lambda: serve.status()["worker"]["state"] == "running" and serve.status()["worker"]["pid"] != worker_pid,
        timeout=60,
        what="the worker restarted",
    )
    assert serve.status()["web"]["pid"] == web_pid  # the web never stopped
    assert serve.get("/readyz")[1].count("degraded") == 0
    metrics = serve.get("/metrics")[1]
    assert 'lessonboard_serve_child_exits_total{child="worker"} 1.0' in metrics, [
        line for line in metrics.splitlines() if "serve" in line
    ]
    assert "worker exited with status -9; restarting it in 3.0 s" in serve.log()
    assert f"Metrics: {serve.url}/metrics (open to this machine only" in serve.log()
    serve.stop()
    assert serve.proc.returncode == 0


def test_it_restarts_the_web_and_beat_when_they_die_too(serve_factory) -> None:  # type: ignore[no-untyped-def]
    serve = serve_factory(LESSONBOARD_SERVE_RESTART_BACKOFF="1").wait_up()
    worker_pid = serve.status()["worker"]["pid"]

    def answers() -> bool:
        try:
            return serve.get("/healthz")[0] == 200
        except OSError:  # refused while the web is down
            return False

    for name in ("web", "beat"):
        pid = serve.status()[name]["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_for(
            lambda: serve.status()[name]["state"] == "running" and serve.status()[name]["pid"] != pid,  # noqa: B023
            timeout=60,
            what=f"the {name} restarted",
        )
        assert f"{name} exited with status -9; restarting it in 1.0 s" in serve.log()
    wait_for(answers, timeout=60, what="the restarted web answering")
    assert serve.status()["worker"]["pid"] == worker_pid  # the others kept running
    metrics = serve.get("/metrics")[1]
    for name in ("web", "beat"):
        assert f'lessonboard_serve_child_exits_total{{child="{name}"}} 1.0' in metrics
    serve.stop()
    assert serve.proc.returncode == 0


@pytest.mark.parametrize(
    ("host", "environ", "behind_proxy", "expected"),
    [
        ("127.0.0.1", {}, False, "127.0.0.1,::1"),
        ("localhost", {}, False, "127.0.0.1,::1"),
        ("::1", {}, False, "127.0.0.1,::1"),
        ("0.0.0.0", {}, False, None),  # reachable from the network: a token is needed
        ("127.0.0.1", {}, True, None),  # behind a proxy every request comes from loopback
        ("127.0.0.1", {"LESSONBOARD_METRICS_ALLOWED_ADDRESSES": ""}, False, None),  # the operator's empty list holds
        ("127.0.0.1", {"LESSONBOARD_METRICS_ALLOWED_ADDRESSES": "10.0.0.0/8"}, False, None),
    ],
)
def test_serve_opens_metrics_to_this_machine_only_when_nothing_else_can_reach_it(
    host: str, environ: dict[str, str], behind_proxy: bool, expected: str | None
) -> None:
    from lessonboard.management.commands.serve import metrics_default

    assert metrics_default(host, environ, behind_proxy) == expected


def test_it_exits_non_zero_with_the_reason_when_a_child_crash_loops(serve_factory) -> None:  # type: ignore[no-untyped-def]
    serve = serve_factory(LESSONBOARD_SERVE_RESTART_BACKOFF="0.1", LESSONBOARD_SERVE_CRASH_LOOP_EXITS="3").wait_up()
    web_pid = serve.status()["web"]["pid"]
    killed: list[int] = []
    for _ in range(3):
        pid = wait_for(
            lambda: serve.status()["worker"]["pid"] not in killed and serve.status()["worker"]["pid"],
            timeout=60,
            what="a running worker",
        )
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    assert serve.wait_exit() == 3
    assert "worker is crash-looping: it exited 3 times within 120 s (last exit status -9)" in serve.log()
    assert f"stopping lessonboard — see {serve.data_dir / 'logs' / 'worker.log'}" in serve.log()
    assert wait_for(lambda: _pid_gone(web_pid), timeout=30, what="the web stopped with serve")


def test_it_stops_its_children_in_order_on_ctrl_c_and_no_request_fails(serve_factory) -> None:  # type: ignore[no-untyped-def]
    serve = serve_factory("--verbose").wait_up()  # the children's output in serve's, to check it below
    children = [serve.status()[name]["pid"] for name in ("web", "worker", "beat")]
    statuses: list[int | str] = []
    stop_polling = threading.Event()

    def poll() -> None:
        while not stop_polling.is_set():
            try:
                statuses.append(serve.get("/healthz")[0])
            except OSError as exc:  # refused once the web stopped listening: not a failed request
                statuses.append(type(exc).__name__)

    poller = threading.Thread(target=poll)
    poller.start()
    wait_for(lambda: len(statuses) > 3, timeout=30, what="requests flowing")
    os.killpg(serve.proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    code = serve.wait_exit()
    stop_polling.set()
    poller.join()

    log = serve.log()
    assert code == 0, log[-3000:]
    assert "Booting worker" in log and not (serve.data_dir / "logs").exists()  # --verbose: shown, not filed
    assert "Handling signal: int" not in log  # gunicorn got serve's SIGTERM, not the terminal's SIGINT
    assert "Aborted!" not in log  # beat too
    assert log.index("Stopped web.") < log.index("Stopped worker.") < log.index("Stopped beat.")
    assert not [s for s in statuses if isinstance(s, int) and s >= 500]
    assert all(_pid_gone(pid) for pid in children)


def test_it_shows_a_child_that_is_down_on_the_overview_and_in_readyz(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.DATA_DIR = tmp_path
    down = {"state": "down", "pid": None, "down_since": "2026-01-01T00:00:00+00:00", "last_exit_status": 1}
    status = {
        "serve_pid": os.getpid(),
        "children": {"web": {"state": "running"}, "worker": {**down, "recent_exits": 2}},
    }
    (tmp_path / "serve-status.json").write_text(json.dumps(status))

    counts = dict((label, value) for _, rows in collect() for label, value, _ in rows)
    ok, detail = supervisor.check_children()

    assert counts["serve processes down (restarting)"] == 1
    assert ok
    assert detail.startswith("degraded: worker down since 2026-01-01T00:00:00+00:00 (exit status 1, 2 recent exit(s))")
