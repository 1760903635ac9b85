"""Real processes for tests: Celery workers and gunicorn, pointed at the *test* database.

Tests that use them must commit their data (``@pytest.mark.django_db(transaction=True)``): the other
processes only see what is committed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

from tests.support.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    """The URL of the database the test run really uses (pytest-django's ``test_…`` copy)."""
    s = connection.settings_dict
    auth = quote(s["USER"] or "")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"])
    host = s["HOST"] or ""
    if host.startswith("/"):
        return f"postgresql://{auth}@/{s['NAME']}?host={host}"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgresql://{auth}@{host}{port}/{s['NAME']}"


def subprocess_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        # lessonboard's settings with the test users' hasher preferred (tests/support/child_settings.py)
        DJANGO_SETTINGS_MODULE="tests.support.child_settings",
        DATABASE_URL=test_database_url(),
        LESSONBOARD_DATA_DIR=str(settings.DATA_DIR),
        LESSONBOARD_ENV_FILE="",
        LESSONBOARD_NODE=settings.NODE,
        PROMETHEUS_MULTIPROC_DIR=os.environ["PROMETHEUS_MULTIPROC_DIR"],
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        PYTHONUNBUFFERED="1",
    )
    if settings.LLM_BASE_URL:
        env.update(LESSONBOARD_LLM_BASE_URL=settings.LLM_BASE_URL, LESSONBOARD_LLM_MODEL=settings.LLM_MODEL)
    env.update(overrides)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ManagedProcess:
    def __init__(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.log_path = Path(tempfile.mkstemp(prefix=f"lb-{name}-", suffix=".log")[1])
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class CeleryWorker(ManagedProcess):
    def __init__(
        self,
        *,
        queues: list[str] | None = None,
        concurrency: int = 1,
        env: dict[str, str] | None = None,
        hostname: str = "worker@%h",
        extra: list[str] | None = None,
        pool: str | None = None,
    ) -> None:
        # LESSONBOARD_TEST_WORKER_POOL=threads runs the same tests against the LLM worker's pool.
        pool = pool or os.environ.get("LESSONBOARD_TEST_WORKER_POOL", "prefork")
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "lessonboard",
            "worker",
            "--loglevel",
            "INFO",
            "--queues",
            ",".join(queues or settings.WORKER_QUEUES),
            "--concurrency",
            str(concurrency),
            "--pool",
            pool,
            "--hostname",
            hostname,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            *(extra or []),
        ]
        super().__init__("worker", cmd, env or subprocess_env())

    def wait_ready(self, timeout: float = 60) -> CeleryWorker:
        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"worker exited early:\n{self.log()[-3000:]}")
            return " ready." in self.log()

        wait_for(ready, timeout=timeout, what="celery worker ready")
        return self

    def child_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]


class Gunicorn(ManagedProcess):
    def __init__(self, *, env: dict[str, str] | None = None, workers: int = 2, extra: list[str] | None = None) -> None:
        self.port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "gunicorn",
            "lessonboard.wsgi:application",
            "--config",
            "python:lessonboard.gunicorn_conf",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--workers",
            str(workers),
            *(extra or []),
        ]
        super().__init__("gunicorn", cmd, env or subprocess_env())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60) -> Gunicorn:
        def up() -> bool:
            if not self.alive():
                raise AssertionError(f"gunicorn exited early:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        wait_for(up, timeout=timeout, what="gunicorn /healthz")
        return self


def purge_broker(broker_url: str | None = None) -> None:
    """Drop messages a previous run left on the broker (redis/amqp keep them between runs)."""
    url = broker_url or settings.CELERY_BROKER_URL
    if url == settings.CELERY_BROKER_URL and settings.EMBEDDED_BROKER:
        folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
        for msg in folder.glob("*.msg"):
            msg.unlink(missing_ok=True)
        return
    from lessonboard.celery import app

    with app.connection_for_write(url) as conn:
        channel = conn.default_channel
        for queue in settings.WORKER_QUEUES:
            try:
                channel.queue_purge(queue)
            except Exception:  # a queue that was never declared has nothing to purge
                continue
