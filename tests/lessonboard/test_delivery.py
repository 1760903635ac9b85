"""Delivery through real processes: tasks published by the web side run in a real Celery worker, on the
filesystem broker and on the machine's Redis and RabbitMQ when they are there; metrics written in a
worker process appear on /metrics served by gunicorn."""

import http.cookiejar
import re
import socket
import urllib.parse
import urllib.request

import pytest
from django.conf import settings

from lessonboard.models import WorkerHeartbeat
from tests.factories import UserFactory
from tests.support.processes import purge_broker, subprocess_env
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

BROKERS = {
    "filesystem": None,
    "redis": ("127.0.0.1", 6379, "redis://127.0.0.1:6379/15"),
    "rabbitmq": ("127.0.0.1", 5672, "amqp://guest:guest@127.0.0.1:5672//"),
}


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _broker_url(name: str) -> str:
    spec = BROKERS[name]
    if spec is None:
        return settings.CELERY_BROKER_URL
    host, port, url = spec
    if not _reachable(host, port):
        pytest.skip(f"{name} is not running on {host}:{port}")
    return url


class Browser:
    """A logged-in HTTP session against a live server (cookies and CSRF, like a browser without JS)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> str:
        with self.opener.open(self.base + path, timeout=10) as response:
            return response.read().decode()

    def post(self, path: str, data: dict[str, str]) -> int:
        csrf = next(c.value for c in self.jar if c.name == "csrftoken")
        body = urllib.parse.urlencode({**data, "csrfmiddlewaretoken": csrf}).encode()
        request = urllib.request.Request(self.base + path, data=body, headers={"Referer": self.base + path})
        with self.opener.open(request, timeout=10) as response:
            return int(response.status)

    def login(self, username: str, password: str) -> None:
        self.get("/accounts/login/")
        self.post("/accounts/login/", {"username": username, "password": password})


@pytest.mark.parametrize("broker", list(BROKERS))
def test_a_task_published_by_the_web_runs_in_a_real_worker(broker, start_worker, start_gunicorn):
    url = _broker_url(broker)
    purge_broker(url)
    env = subprocess_env(CELERY_BROKER_URL=url)
    UserFactory(username="alice", role="operator")
    worker = start_worker(env=env)
    web = start_gunicorn(env=env)

    browser = Browser(web.url)
    browser.login("alice", "pw-not-secret-123")
    assert "Overview" in browser.get("/")
    assert browser.post("/workers/ping", {}) == 200

    # The ping's task ran in the worker (its log says so: the worker's lease keeper also writes the
    # heartbeat row every renewal, without a task).
    wait_for(
        lambda: re.search(r"Task lessonboard\.tasks\.heartbeat\[[^]]+\] succeeded", worker.log()),
        what="the ping's heartbeat task run by the worker",
    )
    beat = wait_for(lambda: WorkerHeartbeat.objects.filter(node="testnode").first(), what="a heartbeat row")
    assert beat.beats >= 1

    def counter_on_metrics():
        text = browser.get("/metrics")
        match = re.search(r'^lessonboard_worker_heartbeats_total\{node="testnode"\} (\S+)$', text, re.M)
        return match and float(match.group(1)) >= 1

    # The counter was incremented in the worker's process and is served by gunicorn's.
    assert wait_for(counter_on_metrics, what="worker counter on gunicorn's /metrics")
