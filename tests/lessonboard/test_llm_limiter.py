"""The node's LLM call slots (lessonboard/llm/limiter.py): bounded in flight across threads and processes, a
dead holder's slot freed by the kernel, and a web request answered 503 at once when the node is full."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest

from lessonboard import llm
from lessonboard.llm import limiter
from tests.fakes.openai_server import Reply
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
