"""Fixtures shared by every test folder: personas, API tokens, the fake OpenAI server, real processes."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.test import Client

from lessonboard.tokens import issue_token
from tests.factories import UserFactory
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.clients import PASSWORD, ApiClient
from tests.support.processes import CeleryWorker, Gunicorn, purge_broker, subprocess_env

# Fixtures more than one folder uses live in tests/support/ (no test module imports another folder's).
pytest_plugins = ["tests.support.queue", "tests.support.review", "tests.support.refine", "tests.support.reflect"]

CHROMIUM = Path("/usr/bin/chromium")
TESTS = Path(__file__).resolve().parent


# --- tiers (docs/testing.md#tiers) -------------------------------------------------------------------------
# Fixtures that start a child process (a Celery worker, gunicorn, a browser) or need one running.
PROCESS_FIXTURES = frozenset({"celery_worker", "start_worker", "start_gunicorn", "lesson_worker", "browser", "page"})
# A test body that starts a process itself (a manage.py/serve/Celery child, an interpreter of its own).
PROCESS_SOURCE = re.compile(r"subprocess\.|Popen|CeleryWorker|Gunicorn|ManagedProcess|sys\.executable|lb\.py")
DB_FIXTURES = frozenset({"db", "transactional_db", "django_db_setup", "live_server", "django_db_serialized_rollback"})


def _starts_a_process(item: pytest.Item) -> bool:
    if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    function = getattr(item, "function", None)
    try:
        return function is not None and bool(PROCESS_SOURCE.search(inspect.getsource(function)))
    except (OSError, TypeError):
        return False


# Test functions measured slow (tests/slow.txt, written by bench/suite_durations.py): left out of --quick.
SLOW = frozenset(
    line.strip() for line in (TESTS / "slow.txt").read_text().splitlines() if line.strip() and not line.startswith("#")
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test with its tier, from what it uses rather than from anyone remembering to:

    * ``process``: starts or needs a child process or a browser (not in ``--quick``);
    * ``slow``: listed in tests/slow.txt, measured slow (not in ``--quick``);
    * ``backend``: talks to the database server or the broker — what CI's second pass, on the machine's
      own PostgreSQL and Redis, runs again. Browser tests and the docs tests are left out of it: the same
      pages and documents do not change with the server behind them."""
    for item in items:
        path = Path(str(item.fspath)).resolve().relative_to(TESTS)
        folder = path.parts[0]
        if f"tests/{path.as_posix()}::{getattr(item, 'originalname', None) or item.name}" in SLOW:
            item.add_marker(pytest.mark.slow)
        if _starts_a_process(item) or item.get_closest_marker("worker") or item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.process)
        uses_db = bool(DB_FIXTURES & set(getattr(item, "fixturenames", ()))) or item.get_closest_marker("django_db")
        uses_broker = item.get_closest_marker("worker") is not None or item.get_closest_marker("process") is not None
        if (uses_db or uses_broker) and folder not in {"e2e", "docs"} and not item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.backend)


# --- personas ----------------------------------------------------------------------------------------
@pytest.fixture
def alice(db: Any) -> Any:
    """Alice operates the queue."""
    return UserFactory(username="alice", role="operator")


@pytest.fixture
def bob(db: Any) -> Any:
    """Bob reviews memory writes."""
    return UserFactory(username="bob", role="reviewer")


@pytest.fixture
def carol(db: Any) -> Any:
    """Carol may only look."""
    return UserFactory(username="carol", role="viewer")


@pytest.fixture
def admin_user(db: Any) -> Any:
    return UserFactory(username="root", role="admin")


@pytest.fixture
def client_as() -> Callable[[Any], Client]:
    def make(user: Any) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


# --- API tokens ------------------------------------------------------------------------------------------
@pytest.fixture
def agent_token(db: Any) -> Callable[..., str]:
    """``agent_token("name", "ingest")`` → the plaintext of a fresh token."""

    def make(name: str = "test-agent", *scopes: str) -> str:
        return issue_token(name, scopes or ("full",)).plaintext

    return make


@pytest.fixture
def api(agent_token: Callable[..., str]) -> ApiClient:
    """An API client holding a ``full`` token."""
    return ApiClient(agent_token("test-agent", "full"))


# --- the fake OpenAI server ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def fake_openai_server() -> Iterator[FakeOpenAIServer]:
    server = FakeOpenAIServer().start()
    yield server
    server.stop()


@pytest.fixture
def fake_openai(fake_openai_server: FakeOpenAIServer, settings: Any) -> Iterator[FakeOpenAIServer]:
    """The fake server, reset, and the gateway's settings pointing at it; the node's adaptive limit for
    its model back at the ceiling (a test's 429s must not cut the next test's concurrency)."""
    from lessonboard.llm import limiter

    fake_openai_server.reset()
    settings.LLM_BASE_URL = fake_openai_server.url
    settings.LLM_MODEL = fake_openai_server.model
    settings.LLM_API_KEY = "sk-test"
    settings.LLM_TIMEOUT = 5.0
    limiter.reset(fake_openai_server.model)
    yield fake_openai_server
    fake_openai_server.reset()
    limiter.reset(fake_openai_server.model)


# --- the test database ----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: Any, django_db_blocker: Any, pytestconfig: pytest.Config) -> Iterator[None]:
    """pytest-django's, and before the test database is dropped, the connections of the query-embedding
    threads closed: ``lessons.retrieval`` embeds queries in a pool whose threads keep connections of their
    own (the gateway reads the LLM breaker there), which would otherwise hold the database open.

    The database it built is stamped with the migrations it came from, so the next run reuses it. A reused
    one is flushed first, as a transactional test leaves it: a process of the last run that wrote after its
    last flush (a worker renewing its node lease on the way out) leaves rows no test of this run expects."""
    from django.core.management import call_command

    from tests import harness

    if not harness.record_built_database(pytestconfig):
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)
    yield
    from lessons import retrieval

    pool = retrieval._embedder_pool
    barrier = threading.Barrier(pool._max_workers)  # every thread of the pool takes one

    def close() -> None:
        barrier.wait(30)
        connections.close_all()

    for future in [pool.submit(close) for _ in range(pool._max_workers)]:
        future.result(timeout=60)


# --- real processes --------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def celery_worker(
    django_db_setup: Any, django_db_blocker: Any, fake_openai_server: FakeOpenAIServer
) -> Iterator[CeleryWorker]:
    """One real worker process for the session, on every queue, talking to the fake LLM.

    It depends on ``django_db_setup`` so it stops before the test database is dropped.
    """
    with django_db_blocker.unblock():
        purge_broker()
        env = subprocess_env(
            LESSONBOARD_LLM_BASE_URL=fake_openai_server.url,
            LESSONBOARD_LLM_MODEL=fake_openai_server.model,
            LESSONBOARD_LLM_TIMEOUT="5s",
        )
    worker = CeleryWorker(env=env).wait_ready()
    yield worker
    worker.stop()


@pytest.fixture
def start_worker(django_db_setup: Any) -> Iterator[Callable[..., CeleryWorker]]:
    """``start_worker(queues=[...], env=subprocess_env(...))`` → a ready worker, stopped after the test."""
    started: list[CeleryWorker] = []

    def start(**kwargs: Any) -> CeleryWorker:
        worker = CeleryWorker(**kwargs)
        started.append(worker)  # before it is ready: one that never gets there is stopped too
        return worker.wait_ready()

    yield start
    for worker in started:
        worker.kill() if worker.alive() else worker.stop()


@pytest.fixture
def start_gunicorn(django_db_setup: Any) -> Iterator[Callable[..., Gunicorn]]:
    started: list[Gunicorn] = []

    def start(**kwargs: Any) -> Gunicorn:
        server = Gunicorn(**kwargs)
        started.append(server)  # before it is ready: one that never gets there is stopped too
        return server.wait_ready()

    yield start
    for server in started:
        server.stop()


# --- the browser -----------------------------------------------------------------------------------------
BROWSER_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
        pytest.skip("no Chromium at /usr/bin/chromium (Debian's chromium package): browser tests skipped")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make between
    # browser steps are still synchronous and safe.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_FLAGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def login(live_server: Any) -> Callable[[Any, str], None]:
    """``login(page, "alice")`` through the real login form."""

    def do(page: Any, username: str, password: str = PASSWORD) -> None:
        page.goto(live_server.url + "/accounts/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login/" not in url)

    return do


@pytest.fixture(autouse=True)
def _no_embed_task_pending_from_an_earlier_test() -> None:
    """A new lesson sends no ``embed_new`` task while one is pending (``lessons.vectors``); an earlier
    test's pending one may never run here (the broker gets purged), so each test starts without it."""
    from lessons.vectors import disarm_embed_new

    disarm_embed_new()
