"""Memory that stays flat (docs/operations.md#memory): web workers recycle after LESSONBOARD_WEB_MAX_REQUESTS
(with jitter), Celery prefork children after a task count or a resident size, and ``serve`` starts the web
with a fixed allocator mmap threshold."""

from __future__ import annotations

import importlib
import urllib.request
from typing import Any

import psutil

from lessonboard import gunicorn_conf
from lessonboard.celery import app
from lessonboard.management.commands import serve
from tests.support.processes import subprocess_env
from tests.support.wait import wait_for


def test_gunicorn_recycles_with_jitter_from_the_environment(monkeypatch: Any) -> None:
    monkeypatch.setenv("LESSONBOARD_WEB_MAX_REQUESTS", "77")
    monkeypatch.setenv("LESSONBOARD_WEB_MAX_REQUESTS_JITTER", "7")
    conf = importlib.reload(gunicorn_conf)
    assert (conf.max_requests, conf.max_requests_jitter) == (77, 7)
    monkeypatch.delenv("LESSONBOARD_WEB_MAX_REQUESTS")
    monkeypatch.delenv("LESSONBOARD_WEB_MAX_REQUESTS_JITTER")
    conf = importlib.reload(gunicorn_conf)
    assert (conf.max_requests, conf.max_requests_jitter) == (2000, 200)  # on by default


def test_celery_children_recycle_by_task_count_and_resident_size(settings: Any) -> None:
    assert app.conf.worker_max_tasks_per_child == settings.CELERY_WORKER_MAX_TASKS_PER_CHILD == 1000
    assert app.conf.worker_max_memory_per_child == 1536 * 1024  # KiB, as Celery counts


def test_a_dead_childs_task_goes_back_to_the_broker_after_the_configured_wait(settings: Any) -> None:
    """docs/queue.md#crash-safety: 2 s, not Celery's 10 s, while the dead child's slot stays blocked."""
    assert app.conf.worker_lost_wait == settings.CELERY_WORKER_LOST_WAIT == 2.0
    assert app.conf.task_acks_late and app.conf.task_reject_on_worker_lost


def test_serve_gives_the_web_a_fixed_mmap_threshold_unless_the_environment_says() -> None:
    assert serve.WEB_ALLOCATOR_ENV == {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "1048576"}


def test_a_web_worker_is_replaced_after_its_requests(start_gunicorn: Any) -> None:
    # 40, not fewer: the readiness probe's own first requests count, and can time out on a busy machine.
    env = subprocess_env(LESSONBOARD_WEB_MAX_REQUESTS="40", LESSONBOARD_WEB_MAX_REQUESTS_JITTER="0")
    server = start_gunicorn(env=env, workers=1)
    (first,) = psutil.Process(server.proc.pid).children()
    for _ in range(41):
        with urllib.request.urlopen(server.url + "/healthz", timeout=120) as response:
            assert response.status == 200

    def replaced() -> bool:
        return [p.pid for p in psutil.Process(server.proc.pid).children()] not in ([], [first.pid])

    wait_for(replaced, timeout=30, what="a new web worker after 40 requests")
    with urllib.request.urlopen(server.url + "/healthz", timeout=120) as response:
        assert response.status == 200  # the replacement serves
