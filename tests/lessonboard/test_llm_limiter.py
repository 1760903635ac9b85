"""The node's LLM call slots (lessonboard/llm/limiter.py): bounded in flight across threads and processes, a
dead holder's slot freed by the kernel, and a web request answered 503 at once when the node is full or
half its web process's threads already wait on the LLM."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import pytest

from lessonboard import llm
from lessonboard.llm import limiter
from tests.fakes.openai_server import Reply
from tests.support.processes import subprocess_env
from tests.support.wait import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slots(settings: Any, tmp_path: Any) -> Any:
    settings.DATA_DIR = tmp_path
    settings.LLM_CONCURRENCY = 3
    settings.LLM_CONCURRENCY_BY_MODEL = ["big-model=1"]
    return settings


def test_the_limit_is_per_model_and_configurable(slots: Any) -> None:
    assert limiter.limit_for("fake-model") == 3 and limiter.limit_for("big-model") == 1


def test_calls_in_flight_never_exceed_the_limit(slots: Any, fake_openai: Any) -> None:
    fake_openai.latency = 30.0  # released by the test
    errors: list[BaseException] = []

    def call() -> None:
        try:
            llm.chat([{"role": "user", "content": "hi"}])
        except BaseException as exc:  # pragma: no cover - shown by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    wait_for(lambda: fake_openai.in_flight == 3, timeout=20, what="three calls in flight")
    assert limiter.in_use("fake-model") == 3 and limiter.saturated("fake-model")
    with limiter.no_wait() as guard, pytest.raises(llm.LLMSaturated):
        llm.chat([{"role": "user", "content": "from the web"}])
    assert guard.refused
    fake_openai.release()
    for thread in threads:
        thread.join(30)
    assert not errors and fake_openai.max_in_flight == 3
    assert len(fake_openai.chat_requests()) == 8 and limiter.in_use("fake-model") == 0


def test_a_killed_holder_frees_its_slot(slots: Any) -> None:
    folder = limiter.slot_dir("big-model")
    folder.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(folder / '0.lock')!r}, os.O_CREAT | os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert limiter.saturated("big-model")
        with pytest.raises(llm.LLMSaturated), limiter.slot("big-model", wait=0):
            pass
    finally:
        holder.kill()  # kill -9: no cleanup runs in the holder
        holder.wait()
    with limiter.slot("big-model", wait=0):
        assert limiter.in_use("big-model") == 1


def test_a_review_answers_503_at_once_when_every_slot_is_in_use(slots: Any, fake_openai: Any, api: Any) -> None:
    from lessons.review.models import ReviewRun

    slots.LLM_CONCURRENCY = 1
    fake_openai.script(Reply(text='{"proposals": []}'))
    with limiter.slot("fake-model", wait=0):  # a worker's call holds the node's only slot
        response = api.post("/api/v1/reviews", {"summary": "did work", "workspace": "acme"})
        assert response.status_code == 503 and response["Retry-After"] == "1"
        assert "slot" in response.json()["error"] and not ReviewRun.objects.exists()
    assert not fake_openai.chat_requests()
    assert api.post("/api/v1/reviews", {"summary": "did work", "workspace": "acme"}).status_code == 200


def test_a_web_process_lets_half_its_threads_do_llm_work_and_refuses_the_next_at_once(settings: Any) -> None:
    settings.WEB_THREADS = 5
    assert limiter.web_share() == 2
    with ExitStack() as held:
        for _ in range(2):
            held.enter_context(limiter.web_call())
        assert limiter.web_calls() == 2
        with pytest.raises(limiter.WebShareFull, match="LESSONBOARD_WEB_THREADS"), limiter.web_call():
            pass  # pragma: no cover - never entered
        assert limiter.web_calls() == 2  # the refused one took no place
    assert limiter.web_calls() == 0
    with limiter.web_call() as guard:  # free again; and inside it no call waits for a node slot
        assert isinstance(guard, limiter.NoWait)
    settings.WEB_THREADS = 1
    assert limiter.web_share() == 1


def test_a_review_answers_503_at_once_when_the_web_processs_share_is_taken(
    slots: Any, fake_openai: Any, api: Any
) -> None:
    from lessons.review.models import ReviewRun

    slots.WEB_THREADS = 2  # one place for LLM work in this process
    fake_openai.script(Reply(text='{"proposals": []}'))
    with limiter.web_call():  # another review of this process is waiting on the model
        response = api.post("/api/v1/reviews", {"summary": "did work", "workspace": "acme"})
        assert response.status_code == 503 and response["Retry-After"] == "1"
        assert "LESSONBOARD_WEB_THREADS" in response.json()["error"] and not ReviewRun.objects.exists()
    assert not fake_openai.chat_requests()
    assert api.post("/api/v1/reviews", {"summary": "did work", "workspace": "acme"}).status_code == 200


def test_reviews_on_a_slow_model_never_hold_every_thread_of_a_real_web_worker(
    slots: Any, fake_openai: Any, start_gunicorn: Any
) -> None:
    """One gunicorn worker of 4 threads, a model that answers only when released: 2 reviews wait on it,
    every other one is answered 503 at once, and /healthz answers meanwhile."""
    from lessonboard.tokens import issue_token

    token = issue_token("slow-model-reviews", ["full"]).plaintext
    env = subprocess_env(
        LESSONBOARD_WEB_THREADS="4",
        LESSONBOARD_LLM_BASE_URL=fake_openai.url,
        LESSONBOARD_LLM_MODEL=fake_openai.model,
        LESSONBOARD_LLM_TIMEOUT="120s",
    )
    server = start_gunicorn(env=env, workers=1)
    fake_openai.latency = 120.0  # until released
    fake_openai.script(*[Reply(text='{"proposals": []}')] * 8)

    def review() -> int:
        request = urllib.request.Request(
            server.url + "/api/v1/reviews",
            data=b'{"summary": "did work", "workspace": "acme"}',
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=180) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(review) for _ in range(8)]
        wait_for(lambda: sum(f.done() for f in futures) == 6, timeout=60, what="six reviews answered")
        assert sorted(f.result() for f in futures if f.done()) == [503] * 6
        # The worker's share, half its 4 threads, waits on the model; no more ever reach it.
        wait_for(lambda: fake_openai.in_flight == 2, timeout=60, what="two reviews at the model")
        with urllib.request.urlopen(server.url + "/healthz", timeout=30) as response:
            assert response.status == 200  # a free thread answers while two wait on the model
        fake_openai.release()
        assert sorted(f.result(timeout=120) for f in futures) == [200] * 2 + [503] * 6
    assert fake_openai.max_in_flight == 2
