"""The LLM breaker (docs/operations.md#llm-outage) through the real gateway and the fake server: what opens
it, what does not, the half-open probe, and refine runs and reviews while it is open."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from lessonboard import breaker, llm
from lessonboard.models import BreakerState, LLMBreaker
from lessonq import leader
from refine import runs
from refine.models import RefineRun, RunStatus
from refine.tasks import run_refine
from tests.fakes.openai_server import Reply

pytestmark = pytest.mark.django_db


def _ask() -> llm.ChatResult:
    return llm.chat([{"role": "user", "content": "hello"}])


def _row(settings: Any) -> LLMBreaker:
    return LLMBreaker.objects.get(pk=settings.LLM_BASE_URL)


@pytest.fixture
def threshold(settings: Any) -> int:
    settings.LLM_BREAKER_THRESHOLD = 3
    settings.LLM_BREAKER_PROBE_INTERVAL = 30.0
    return 3


def _open(fake_openai: Any, threshold: int) -> None:
    fake_openai.script(*[Reply(status=503, error_message="upstream down")] * threshold)
    for _ in range(threshold):
        with pytest.raises(llm.TransientLLMError):
            _ask()


def test_it_opens_after_consecutive_outage_errors_and_then_refuses_calls(fake_openai, threshold, settings):
    _open(fake_openai, threshold)
    row = _row(settings)
    assert row.state == BreakerState.OPEN and row.failures == threshold and row.trips == 1
    assert "upstream down" in row.last_error
    with pytest.raises(llm.LLMUnreachable) as info:
        _ask()
    assert info.value.message.startswith("LLM unreachable since ") and "upstream down" in info.value.message
    assert len(fake_openai.chat_requests()) == threshold  # the refused call never reached the endpoint
    assert llm.unavailable_reason().startswith("LLM unreachable since")


def test_it_counts_timeouts_and_connection_errors(fake_openai, threshold, settings):
    settings.LLM_TIMEOUT = 0.2
    fake_openai.script(*[Reply(delay=2, text="late")] * threshold)
    for _ in range(threshold):
        with pytest.raises(llm.TransientLLMError) as info:
            _ask()
        assert info.value.outage
    assert _row(settings).state == BreakerState.OPEN


@pytest.mark.parametrize(
    "reply", [Reply(status=400, error_message="context too long"), Reply(body="{not json")]
)  # a 429 is neither: it pauses calls and leaves the count alone (tests/lessonboard/test_llm_rate_limit.py)
def test_errors_that_belong_to_the_request_never_open_it(fake_openai, threshold, settings, reply):
    fake_openai.script(Reply(status=503), Reply(status=503), *[reply] * (threshold * 2), Reply(status=503))
    for _ in range(threshold * 2 + 3):
        with pytest.raises(llm.LLMError):
            _ask()
    row = _row(settings)
    assert row.state == BreakerState.CLOSED and row.failures == 1  # the answers reset the count


def test_an_answer_resets_the_count(fake_openai, threshold, settings):
    fake_openai.script(Reply(status=502), Reply(status=502), "fine", Reply(status=502), Reply(status=502))
    for expected in (llm.TransientLLMError, llm.TransientLLMError, None, llm.TransientLLMError, llm.TransientLLMError):
        if expected is None:
            assert _ask().text == "fine"
        else:
            with pytest.raises(expected):
                _ask()
    assert _row(settings).state == BreakerState.CLOSED and _row(settings).failures == 2


def test_a_due_probe_that_gets_an_answer_closes_it_and_runs_the_recovery_hooks(
    fake_openai, threshold, settings, monkeypatch
):
    recovered: list[str] = []
    monkeypatch.setattr(breaker, "RECOVERY_HOOKS", [lambda: recovered.append("sweep")])
    _open(fake_openai, threshold)
    assert breaker.probe() == "open" and not recovered  # not due yet: no request
    assert len(fake_openai.chat_requests()) == threshold
    later = timezone.now() + timedelta(seconds=31)
    fake_openai.script(Reply(status=503, error_message="still down"))
    assert breaker.probe(now=later) == "open"
    row = _row(settings)
    assert row.state == BreakerState.OPEN and row.probes == 1 and "still down" in row.last_error
    assert breaker.probe(now=later) == "open"  # the next probe is LLM_BREAKER_PROBE_INTERVAL away
    fake_openai.script(Reply(text="pong"))
    assert breaker.probe(now=later + timedelta(seconds=31)) == "closed"
    row = _row(settings)
    assert row.state == BreakerState.CLOSED and row.failures == 0 and row.closed_at is not None
    assert recovered == ["sweep"]
    assert fake_openai.chat_requests()[-1].json["max_tokens"] == 1
    assert _ask().text == "ok" and llm.unavailable_reason() == ""


def test_a_probe_that_finds_no_free_slot_leaves_it_open_and_says_so(fake_openai, threshold, settings, monkeypatch):
    """Every slot taken: the probe's call is not made, so nothing closed the breaker — it stays open (it
    answered "closed" while the row stayed half-open) and the next probe is an interval away."""
    from lessonboard.llm import breaker as llm_breaker

    _open(fake_openai, threshold)
    asked = len(fake_openai.chat_requests())

    def no_slot(**_: Any) -> None:
        raise llm.LLMSaturated("every slot of the node is taken")

    monkeypatch.setitem(llm_breaker._probe_call, "ping", no_slot)
    assert breaker.probe(now=timezone.now() + timedelta(seconds=31)) == "open"
    row = _row(settings)
    assert row.state == BreakerState.OPEN and len(fake_openai.chat_requests()) == asked


def test_a_refine_run_waits_queued_while_it_is_open(fake_openai, threshold, settings):
    _open(fake_openai, threshold)
    run = RefineRun.objects.create(task="deploy", original_draft="draft " * 40, agent="coder", max_passes=1)
    assert run_refine(run.pk) == "waiting for an LLM"
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED and run.error.startswith("waiting: LLM unreachable since")


def test_a_refine_run_the_outage_interrupts_goes_back_to_the_queue(fake_openai, threshold, settings):
    settings.LLM_BREAKER_THRESHOLD = 1
    fake_openai.script(Reply(status=503, error_message="upstream down"))
    run = RefineRun.objects.create(task="deploy", original_draft="draft " * 40, agent="coder", max_passes=1)
    result = runs.execute_run(run.pk)
    assert result is not None and result.status == RunStatus.QUEUED and result.pass_count == 0
    assert result.error.startswith("waiting: LLM unreachable since") and "upstream down" in result.error


def test_readyz_says_degraded_and_stays_200_while_it_is_open(fake_openai, threshold, settings, client):
    leader.hold("beat:test:1")  # a scheduler runs (else /readyz says "degraded" for that)
    assert client.get("/readyz").json()["status"] == "ready"
    _open(fake_openai, threshold)
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 200 and body["status"] == "degraded"
    assert body["checks"]["llm"]["ok"] is False and "upstream down" in body["checks"]["llm"]["detail"]


def test_the_overview_and_the_queue_page_show_the_outage_escaped(fake_openai, threshold, client_as, alice):
    fake_openai.script(*[Reply(status=503, error_message="<b>down</b>")] * threshold)
    for _ in range(threshold):
        with pytest.raises(llm.TransientLLMError):
            _ask()
    page = client_as(alice)
    for url in ("/", "/queue/"):
        html = page.get(url).content.decode()
        assert 'id="llm-outage"' in html and "LLM unreachable since" in html
        assert "&lt;b&gt;down&lt;/b&gt;" in html and "<b>down</b>" not in html


def test_a_review_answers_503_with_the_outage_while_it_is_open(fake_openai, threshold, api):
    from lessons.review.models import ReviewRun

    _open(fake_openai, threshold)
    response = api.post("/api/v1/reviews", {"summary": "did work", "workspace": "acme"})
    assert response.status_code == 503 and response["Retry-After"] == "30"
    assert response.json()["error"].startswith("LLM unreachable since")
    assert not ReviewRun.objects.exists() and len(fake_openai.chat_requests()) == threshold
