"""The node's adaptive LLM concurrency (AIMD in lessonboard/llm/limiter.py), against the fake's 429 mode:
rate-limit answers and timeouts cut the calls a node may have in flight, answers grow it back up to the
configured ceiling, one burst cuts once, the value is shared by the node's processes, a writer killed
with its lock held blocks no one, and the limit shows in /metrics, /readyz and on the Overview."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from lessonboard import llm
from lessonboard.llm import limiter
from lessonboard.models import LLMBreaker
from tests.fakes.openai_server import Reply
from tests.support.processes import subprocess_env
from tests.support.wait import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "fake-model"


@pytest.fixture
def ceiling4(settings: Any, tmp_path: Any, fake_openai: Any) -> Any:
    settings.DATA_DIR = tmp_path
    settings.LLM_CONCURRENCY = 4
    settings.LLM_CONCURRENCY_BY_MODEL = []
    return fake_openai


def _ask() -> llm.ChatResult:
    return llm.chat([{"role": "user", "content": "hi"}])


def _lift_pause(settings: Any) -> None:
    """The provider's pause is its own mechanism (test_llm_rate_limit.py); here it is lifted at once."""
    LLMBreaker.objects.filter(pk=settings.LLM_BASE_URL).update(rate_limits=0, paused_until=None)


def _waiting_for_a_slot(monkeypatch: Any) -> set[int]:
    """The threads that have found every slot they may take held (so they wait in ``limiter.slot``)."""
    waiting: set[int] = set()
    take = limiter._try_take

    def try_take(folder: Path, limit: int) -> int | None:
        fd = take(folder, limit)
        if fd is None:
            waiting.add(threading.get_ident())
        return fd

    monkeypatch.setattr(limiter, "_try_take", try_take)
    return waiting


def test_429s_cut_the_allowed_concurrency_and_answers_grow_it_back_to_the_ceiling(ceiling4: Any, settings: Any) -> None:
    assert limiter.allowed(MODEL) == 4  # a node starts at the configured ceiling
    for expected in (2, 1, 1):  # halved per 429, never below the floor of 1
        ceiling4.script(Reply(status=429, headers={"Retry-After": "0"}))
        with pytest.raises(llm.LLMRateLimited):
            _ask()
        assert limiter.allowed(MODEL) == expected
        _lift_pause(settings)
    answers = 0
    while limiter.allowed(MODEL) < 4:
        _ask()
        answers += 1
        assert answers < 20, "the limit never grew back"
    # Additive increase: one slot per window of answers (1 → 2 → 3 → 4 takes 1 + 2 + 3 answers).
    assert answers == 6
    for _ in range(5):
        _ask()
    assert limiter.allowed_exact(MODEL) == 4.0  # bounded by the ceiling


def test_a_timeout_cuts_too_and_another_error_does_not(ceiling4: Any, settings: Any) -> None:
    settings.LLM_TIMEOUT = 0.3
    ceiling4.script(Reply(status=500), Reply(status=400))
    for _ in range(2):
        with pytest.raises(llm.LLMError):
            _ask()
    assert limiter.allowed_exact(MODEL) == 4.0  # an outage error or a refusal says nothing about load
    ceiling4.script(Reply(delay=5))
    with pytest.raises(llm.TransientLLMError, match="timed out"):
        _ask()
    assert limiter.allowed(MODEL) == 2
    ceiling4.release()


def test_one_burst_of_429s_cuts_once(ceiling4: Any, settings: Any) -> None:
    ceiling4.script(*[Reply(status=429, delay=30, headers={"Retry-After": "0"}) for _ in range(4)])
    errors: list[BaseException] = []

    def call() -> None:
        try:
            _ask()
        except llm.LLMRateLimited as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    wait_for(lambda: ceiling4.in_flight == 4, timeout=20, what="four calls in flight")
    ceiling4.release()  # the four 429s arrive together
    for thread in threads:
        thread.join(30)
    assert len(errors) == 4
    assert limiter.allowed(MODEL) == 2  # the calls had all started before the first cut: one halving


def test_calls_queued_for_a_slot_when_a_pause_begins_never_reach_the_provider_and_the_burst_cuts_once(
    ceiling4: Any, settings: Any, monkeypatch: Any
) -> None:
    """Four calls in flight meet a 429 naming 30 s while four more wait for a slot: those four are refused by
    the pause once they hold a slot, as any call during it is, and the node's limit is halved once."""
    settings.LLM_TIMEOUT = 120.0  # the four in flight answer when released, not when a timeout strikes
    settings.LLM_SLOT_WAIT = 120.0
    ceiling4.script(*[Reply(status=429, delay=120, headers={"Retry-After": "30"}) for _ in range(4)])
    waiting = _waiting_for_a_slot(monkeypatch)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            _ask()
        except BaseException as exc:
            errors.append(exc)

    in_flight = [threading.Thread(target=call) for _ in range(4)]
    for thread in in_flight:
        thread.start()
    wait_for(lambda: ceiling4.in_flight == 4, timeout=20, what="four calls in flight")
    queued = [threading.Thread(target=call) for _ in range(4)]
    for thread in queued:
        thread.start()
    wait_for(lambda: len(waiting) == 4, timeout=20, what="four calls waiting for a slot")
    ceiling4.release()  # the four 429s arrive; each pauses the endpoint before it gives its slot back
    for thread in in_flight + queued:
        thread.join(60)
    assert len(errors) == 8 and all(isinstance(exc, llm.LLMRateLimited) for exc in errors), errors
    assert sorted(exc.paused for exc in errors) == [False] * 4 + [True] * 4  # 4 met the 429, 4 were refused
    assert len(ceiling4.chat_requests()) == 4  # the queued calls sent nothing into the pause
    row = LLMBreaker.objects.get(pk=settings.LLM_BASE_URL)
    assert row.rate_limit_hits == 4 and row.paused_until is not None
    assert limiter.allowed(MODEL) == 2  # one halving for the burst


def test_a_call_that_waited_for_its_slot_through_a_cut_does_not_cut_again(ceiling4: Any, monkeypatch: Any) -> None:
    waiting = _waiting_for_a_slot(monkeypatch)

    def late_call() -> None:
        with limiter.slot(MODEL, wait=60) as held:
            held.outcome = "overload"  # its 429 is of the burst it queued behind

    late = threading.Thread(target=late_call)
    with ExitStack() as burst:
        for _ in range(4):
            burst.enter_context(limiter.slot(MODEL, wait=0))
        late.start()
        wait_for(lambda: waiting, timeout=20, what="a call waiting for a slot")
        limiter.overloaded(MODEL, started=0.0)  # the burst's first 429 cuts 4 → 2 while it waits
    late.join(30)
    assert not late.is_alive()
    assert limiter.allowed(MODEL) == 2  # not 1: it asked for its slot before the cut


def test_a_caller_takes_no_slot_above_the_cut_limit(ceiling4: Any) -> None:
    limiter.overloaded(MODEL, started=0.0)  # 4 → 2
    with limiter.slot(MODEL, wait=0), limiter.slot(MODEL, wait=0):
        assert limiter.saturated(MODEL)
        with pytest.raises(llm.LLMSaturated), limiter.slot(MODEL, wait=0):
            pass
    assert not limiter.saturated(MODEL)


def test_the_limit_is_shared_by_the_nodes_processes(ceiling4: Any) -> None:
    limiter.overloaded(MODEL, started=0.0)
    script = (
        "import django, json; django.setup()\n"
        "from lessonboard.llm import limiter\n"
        f"print(json.dumps(limiter.allowed_exact({MODEL!r})))\n"
        f"limiter.overloaded({MODEL!r}, started=__import__('time').time())\n"
    )
    env = subprocess_env(LESSONBOARD_LLM_CONCURRENCY="4")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == 2.0  # it read this process's cut
    assert limiter.allowed(MODEL) == 1  # and this process reads its cut


def test_a_writer_killed_holding_the_lock_blocks_no_one(ceiling4: Any) -> None:
    folder = limiter.slot_dir(MODEL)
    folder.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, time\n"
            f"fd = os.open({str(folder / 'aimd.lock')!r}, os.O_CREAT | os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    done = threading.Event()
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        cutter = threading.Thread(target=lambda: (limiter.overloaded(MODEL, started=0.0), done.set()))
        cutter.start()
        assert not done.wait(0.2)  # waits on the holder's lock (not a timing assertion: it must not pass it)
    finally:
        holder.kill()  # kill -9: no cleanup runs in the holder
        holder.wait()
    cutter.join(30)
    assert done.is_set() and limiter.allowed(MODEL) == 2


def test_the_limit_shows_in_metrics_readyz_and_the_overview(
    ceiling4: Any, settings: Any, client: Any, client_as: Any, alice: Any
) -> None:
    metrics = client.get("/metrics").content.decode()
    assert f'lessonboard_llm_concurrency_allowed{{model="{MODEL}"}} 4.0' in metrics
    assert f'lessonboard_llm_concurrency_max{{model="{MODEL}"}} 4.0' in metrics
    assert client.get("/readyz").json()["checks"]["llm"]["ok"] is True
    limiter.overloaded(MODEL, started=0.0)
    metrics = client.get("/metrics").content.decode()
    assert f'lessonboard_llm_concurrency_allowed{{model="{MODEL}"}} 2.0' in metrics
    assert "lessonboard_llm_concurrency_cuts_total" in metrics
    detail = client.get("/readyz").json()["checks"]["llm"]
    assert detail["ok"] is True and f"{MODEL}: 2 of 4 calls in flight allowed" in detail["detail"]
    overview = client_as(alice).get("/").content.decode()
    assert 'id="llm-concurrency"' in overview and "2 of 4" in overview
