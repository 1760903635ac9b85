"""`manage.py serve`: the whole of lessonboard on one machine, in the foreground.

Order of start: embedded PostgreSQL (unless DATABASE_URL) → migrate → first-run admin → Celery worker
and beat → gunicorn → wait for /healthz → print the URL and how to log in, last. The children's output goes
to ``<data dir>/logs/<child>.log`` (the previous run's is kept as ``.log.1``); ``--verbose`` shows it here.
Order of stop (Ctrl-C or SIGTERM): web first (no new work accepted), then the workers drain within
LESSONBOARD_DRAIN_TIMEOUT (the WAL keeps whatever is not finished), then beat, then PostgreSQL.

Each child runs in its own session, so a terminal's Ctrl-C reaches only serve, which stops them in that
order; a child that exits meanwhile is restarted with a backoff, and one that crash-loops makes serve stop
and exit non-zero (lessonboard/supervisor.py, docs/operations.md#supervision).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lessonboard import embedded, multiproc
from lessonboard.roles import ADMIN, assign_role
from lessonboard.supervisor import Child, CrashLoop, clear_status, write_status

METRICS_ENV = "LESSONBOARD_METRICS_ALLOWED_ADDRESSES"
LOOPBACK = "127.0.0.1,::1"


def metrics_default(host: str, environ: dict[str, str], behind_tls_proxy: bool) -> str | None:
    """The allow-list serve gives its web server when the operator set none: this machine only, when the
    web listens on loopback alone and no proxy forwards strangers (behind one, every request would come
    from loopback). An operator's value, even an empty one, is kept (docs/security.md#metrics)."""
    if METRICS_ENV in environ or behind_tls_proxy:
        return None
    try:
        loopback_only = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback_only = host == "localhost"
    return LOOPBACK if loopback_only else None


# glibc's allocator in the web workers (docs/operations.md#memory): 2 arenas instead of 8 per core for 16
# threads, and a fixed mmap threshold, so a 15 MiB body is mapped and unmapped whole instead of raising the
# threshold and fragmenting the heap (bench/bench_abuse.py row 6). The environment's own values win.
WEB_ALLOCATOR_ENV = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}


class Command(BaseCommand):
    help = "Run lessonboard: (embedded) PostgreSQL, Celery worker and beat, and gunicorn."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=settings.HOST)
        parser.add_argument("--port", type=int, default=settings.PORT)
        parser.add_argument("--no-workers", action="store_true", help="web only (workers run elsewhere)")
        parser.add_argument(
            "--demo", action="store_true", help="seed the demo workspace with sample data first (lessonboard/demo.py)"
        )
        parser.add_argument(
            "--verbose",
            action="store_true",
            help="show the children's output (web, worker, beat) here instead of only in <data dir>/logs/",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.stop_requested = threading.Event()
        self.children: list[Child] = []
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        try:
            child_env = self._prepare()
            self.log_dir: Path | None = None if options["verbose"] else Path(settings.DATA_DIR) / "logs"
            if self.log_dir is not None:
                self.stdout.write(f"The children's output goes to {self.log_dir}/ (serve --verbose shows it here).")
            if options["demo"]:
                call_command("demo", stdout=self.stdout)
            self._start_children(child_env, options)
            url = f"http://{options['host']}:{options['port']}/"
            if not self._wait_for_web(url):
                # The first run's password is shown once: not lost with a web server that failed.
                self.stderr.write("\n".join(self.login_hint))
                web = next(c for c in self.children if c.name == "web")
                raise CommandError(f"the web server did not come up; see {web.where_output_goes}")
            self._print_welcome(url)
            self._supervise()
        except CrashLoop as exc:
            raise CommandError(str(exc), returncode=3) from exc
        finally:
            self._shutdown()

    # --- start -----------------------------------------------------------------------------------
    def _prepare(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DJANGO_SETTINGS_MODULE"] = "lessonboard.settings"
        if settings.EMBEDDED_DATABASE:
            pgdata = settings.EMBEDDED_PGDATA
            self.stdout.write(f"Starting embedded PostgreSQL in {pgdata} …")
            embedded.start(pgdata)
            name = str(settings.DATABASES["default"]["NAME"])
            embedded.ensure_database(pgdata, name)
            settings.DATABASES["default"]["HOST"] = str(embedded.socket_dir(pgdata))
            env["DATABASE_URL"] = embedded.database_url(pgdata, name)
        # Metrics of a previous run are stale: the files of processes that are gone go (serve's own and
        # those of any other live lessonboard process on this host stay; lessonboard.multiproc).
        metrics_dir = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
        multiproc.clean(metrics_dir)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
        self.stdout.write("Applying migrations …")
        call_command("migrate", interactive=False, verbosity=0)
        self._ensure_admin()
        return env

    def _ensure_admin(self) -> None:
        User = get_user_model()
        self.login_hint: list[str]
        username = settings.ADMIN_USERNAME
        if User.objects.filter(is_superuser=True).exists():
            self.login_hint = [
                "Log in with the admin account created on the first run "
                f"(user '{username}', password printed then or set by LESSONBOARD_ADMIN_PASSWORD).",
                f"Forgot the password? python3 lb.py manage changepassword {username}",
            ]
            return
        password = settings.ADMIN_PASSWORD or secrets.token_urlsafe(12)
        user = User.objects.create_user(username=username, email=settings.ADMIN_EMAIL, password=password)
        assign_role(user, ADMIN)
        shown = password if not settings.ADMIN_PASSWORD else "(the value of LESSONBOARD_ADMIN_PASSWORD)"
        self.login_hint = [
            "First run: created the admin account.",
            f"    username: {username}",
            f"    password: {shown}",
            "The generated password is shown only this once: write it down.",
        ]

    def _start_children(self, env: dict[str, str], options: dict[str, Any]) -> None:
        python = sys.executable
        bind = f"{options['host']}:{options['port']}"
        self.metrics_hint = ""
        allowed = metrics_default(options["host"], env, settings.BEHIND_TLS_PROXY)
        if allowed is not None:
            env[METRICS_ENV] = allowed
            self.metrics_hint = "Metrics: {url}metrics (open to this machine only; docs/security.md#metrics)"
        web = [
            python,
            "-m",
            "gunicorn",
            "lessonboard.wsgi:application",
            "--config",
            "python:lessonboard.gunicorn_conf",
            "--bind",
            bind,
            "--workers",
            str(settings.WEB_WORKERS),
        ]
        self._spawn("web", web, {**WEB_ALLOCATOR_ENV, **env})
        if options["no_workers"]:
            return
        data = settings.DATA_DIR
        split = settings.LLM_WORKER_THREADS > 0
        queues = [q for q in settings.WORKER_QUEUES if not split or q not in settings.LLM_WORKER_QUEUES]
        worker = self._worker_cmd(python, queues, "prefork", settings.WORKER_CONCURRENCY, "worker")
        llm_worker = self._worker_cmd(python, settings.LLM_WORKER_QUEUES, "threads", settings.LLM_WORKER_THREADS, "llm")
        beat = [
            python,
            "-m",
            "celery",
            "-A",
            "lessonboard",
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            str(data / "celerybeat-schedule"),
            "--pidfile",
            str(data / "celerybeat.pid"),
        ]
        self._spawn("worker", worker, env)
        if split:
            self._spawn("llm-worker", llm_worker, env)
        self._spawn("beat", beat, env)
        # Beat's first heartbeat comes one interval later; ask for one now so the Overview fills at once.
        from lessonboard.tasks import heartbeat

        heartbeat.delay()

    @staticmethod
    def _worker_cmd(python: str, queues: list[str], pool: str, concurrency: int, name: str) -> list[str]:
        """A Celery worker's command line. The LLM worker runs threads: its jobs wait on the LLM's answer
        with the GIL released, so 16 threads keep 16 calls in flight in one process while the prefork
        worker's processes stay free for CPU work (docs/benchmarks.md#llm-throughput)."""
        return [
            python,
            "-m",
            "celery",
            "-A",
            "lessonboard",
            "worker",
            "--loglevel",
            "INFO",
            "--queues",
            ",".join(queues),
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--hostname",
            f"{name}@{settings.NODE}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        self.stdout.write(f"Starting {name}: {' '.join(cmd[1:6])} …")
        log_path = None
        if self.log_dir is not None:
            log_path = self.log_dir / f"{name}.log"
            if log_path.exists():  # one earlier run's log is kept beside this run's
                log_path.replace(log_path.with_name(f"{name}.log.1"))
        child = Child(name, cmd, env, settings.BASE_DIR, log_path=log_path)
        child.start()
        self.children.append(child)
        write_status(self.children)

    def _wait_for_web(self, url: str) -> bool:
        # A fresh worker's first requests can take over a second (Django imports every view on the first
        # one): each probe waits up to 5 s, within 60 s in all.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.stop_requested.is_set() or any(c.proc is None or c.proc.poll() is not None for c in self.children):
                return False
            try:
                with urllib.request.urlopen(url + "healthz", timeout=5) as response:
                    if response.status == 200:
                        return True
            except OSError:
                pass
            self.stop_requested.wait(0.1)
        return False

    def _print_welcome(self, url: str) -> None:
        """The last thing start-up prints: where it runs, how to log in, where the logs are."""
        lines = ["", "=" * 72, f"lessonboard is running at {url}", *self.login_hint]
        lines += [f"Admin site: {url}admin/"] + ([self.metrics_hint.format(url=url)] if self.metrics_hint else [])
        if self.log_dir is not None:
            names = ", ".join(f"{c.name}.log" for c in self.children)
            lines.append(f"Logs: {self.log_dir}/ ({names}); serve --verbose shows them here")
        else:
            lines.append("Logs: the children's output, above (--verbose)")
        lines += ["Press Ctrl-C to stop (workers drain, PostgreSQL stops).", "=" * 72, ""]
        self.stdout.write("\n".join(lines))
        self.stdout.flush()

    # --- run and stop ------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_requested.set()

    def _supervise(self) -> None:
        """Restart children that exit (web and database stay up when a worker dies); CrashLoop ends it."""
        while not self.stop_requested.wait(0.2):
            now = time.monotonic()
            changed = False
            for child in self.children:
                line = child.check(now)  # raises CrashLoop
                if line:
                    self.stderr.write(line)
                    changed = True
                if child.due(now) and not self.stop_requested.is_set():
                    child.start()
                    assert child.proc is not None
                    self.stdout.write(f"Restarted {child.name} (pid {child.proc.pid}).")
                    changed = True
            if changed:
                write_status(self.children)

    def _shutdown(self) -> None:
        self.stdout.write("Stopping lessonboard …")
        # Both workers drain at once (each within the drain timeout), after the web and before beat.
        order = [("web",), ("worker", "llm-worker"), ("beat",)]
        for names in order:
            for child in self.children:
                if child.name in names and child.proc is not None and child.proc.poll() is None:
                    child.proc.send_signal(signal.SIGTERM)
            timeout = settings.DRAIN_TIMEOUT + 5 if "worker" in names else 15
            for child in self.children:
                if child.name not in names or child.proc is None:
                    continue
                try:
                    child.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.stderr.write(f"{child.name} did not stop in {timeout:.0f}s; killing it.")
                    os.killpg(child.proc.pid, signal.SIGKILL)  # its own group: its workers too
                    child.proc.wait()
            for name in names:
                if name == names[0] or any(c.name == name for c in self.children):
                    self.stdout.write(f"Stopped {name}.")
        clear_status()
        if settings.EMBEDDED_DATABASE:
            from django.db import connections

            connections.close_all()
            self.stdout.write("Stopping embedded PostgreSQL …")
            embedded.stop(settings.EMBEDDED_PGDATA)
        self.stdout.write("Stopped.")
