"""Rate limits obeyed as one (docs/operations.md#llm-rate-limit): through the real ``openai`` client against
the fake server; the pause lives on the breaker's row, so every process sees it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from lessonboard import llm
from lessonboard.llm import ratelimit
from lessonboard.models import BreakerState, LLMBreaker
from tests.fakes.openai_server import Reply

pytestmark = pytest.mark.django_db


def _ask() -> llm.ChatResult:
    return llm.chat([{"role": "user", "content": "hello"}])


def _row(settings: Any) -> LLMBreaker:
    return LLMBreaker.objects.get(pk=settings.LLM_BASE_URL)


def _expire(settings: Any) -> None:
    """The pause runs out (as time would): its end moved to the past."""
    LLMBreaker.objects.filter(pk=settings.LLM_BASE_URL).update(paused_until=timezone.now() - timedelta(seconds=1))


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"x-ratelimit-reset-requests": "6m0s", "x-ratelimit-remaining-requests": "0"}, 360.0),
        ({"x-ratelimit-reset-tokens": "250ms"}, 0.25),
        ({"x-ratelimit-reset-requests": "1h", "x-ratelimit-remaining-requests": "5"}, None),
        ({"Retry-After": "soon"}, None),
        ({}, None),
    ],
)
def test_it_reads_the_wait_the_provider_names(headers: dict[str, str], seconds: float | None) -> None:
    assert ratelimit.wait_named({k.lower(): v for k, v in headers.items()}) == seconds


def test_retry_after_as_an_http_date() -> None:
    now = timezone.now()
    when = (now + timedelta(seconds=30)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert 28 <= (ratelimit.wait_named({"retry-after": when}, now=now) or 0) <= 31


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "nan"}, None),
        ({"Retry-After": "inf"}, None),
        ({"Retry-After": "-inf"}, None),
        ({"Retry-After": "1e400"}, None),  # inf once parsed
        ({"retry-after-ms": "nan"}, None),
        ({"retry-after-ms": "inf", "Retry-After": "7"}, 7.0),  # the next header that names a wait
        ({"x-ratelimit-reset-requests": "nan", "x-ratelimit-remaining-requests": "0"}, None),
        ({"Retry-After": "Wed, 21 Oct 99999999999999999999 07:28:00 GMT"}, None),  # a year past C's long
    ],
)
def test_a_wait_that_is_not_a_finite_number_or_date_counts_as_none(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert ratelimit.wait_named({k.lower(): v for k, v in headers.items()}) == seconds


@pytest.mark.parametrize("zone", [" -0000", ""])
def test_retry_after_as_an_http_date_without_a_zone_is_read_as_gmt(zone: str) -> None:
    now = timezone.now().replace(microsecond=0)  # UTC
    when = (now + timedelta(seconds=30)).strftime("%a, %d %b %Y %H:%M:%S") + zone
    assert ratelimit.wait_named({"retry-after": when}, now=now) == 30.0


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_429_naming_a_wait_that_is_no_number_pauses_for_the_backoff(
    fake_openai: Any, settings: Any, value: str
) -> None:
    settings.LLM_RATE_LIMIT_BACKOFF = 2.0
    settings.LLM_RATE_LIMIT_MAX_PAUSE = 300.0
    fake_openai.script(Reply(status=429, headers={"Retry-After": value}))
    with pytest.raises(llm.LLMRateLimited) as info:
        _ask()
    assert info.value.status == 429 and not info.value.paused
    assert info.value.retry_after is not None and 0 <= info.value.retry_after <= 2.0
    row = _row(settings)
    assert row.paused_until - row.rate_limited_since == timedelta(seconds=2)  # the backoff, as for no header


def test_a_429_naming_a_date_without_a_zone_pauses_until_then(fake_openai: Any, settings: Any) -> None:
    settings.LLM_RATE_LIMIT_MAX_PAUSE = 300.0
    when = (timezone.now() + timedelta(hours=1)).strftime("%a, %d %b %Y %H:%M:%S -0000")
    fake_openai.script(Reply(status=429, headers={"Retry-After": when}))
    with pytest.raises(llm.LLMRateLimited) as info:
        _ask()
    assert info.value.status == 429 and not info.value.paused
    row = _row(settings)
    assert row.paused_until - row.rate_limited_since == timedelta(seconds=300)  # the hour named, capped


def test_a_429_pauses_every_call_for_the_named_time_and_makes_none_meanwhile(fake_openai: Any, settings: Any) -> None:
    fake_openai.script(Reply(status=429, headers={"Retry-After": "30"}, error_message="slow down"), "after")
    with pytest.raises(llm.LLMRateLimited) as info:
        _ask()
    assert info.value.status == 429 and not info.value.outage and not info.value.paused
    assert 29 <= (info.value.retry_after or 0) <= 30
    for _ in range(5):  # every later call waits without reaching the provider
        with pytest.raises(llm.LLMRateLimited) as waited:
            _ask()
        assert waited.value.paused and "rate-limited until" in waited.value.message
    assert len(fake_openai.chat_requests()) == 1
    row = _row(settings)
    assert row.rate_limits == 1 and row.rate_limit_hits == 1 and "slow down" in row.last_rate_limit
    assert row.state == BreakerState.CLOSED and row.failures == 0
    pause = ratelimit.current()
    assert pause is not None and 28 <= pause.seconds() <= 30


def test_after_the_pause_one_trial_goes_and_an_answer_lifts_the_limit(fake_openai: Any, settings: Any) -> None:
    fake_openai.script(Reply(status=429, headers={"retry-after-ms": "60000"}), "answer")
    with pytest.raises(llm.LLMRateLimited):
        _ask()
    _expire(settings)
    row = _row(settings)
    assert ratelimit.admit(row) is None  # this caller claimed the trial...
    assert ratelimit.admit(_row(settings)) is not None  # ...and the next one waits behind it
    LLMBreaker.objects.filter(pk=settings.LLM_BASE_URL).update(paused_until=timezone.now() - timedelta(seconds=1))
    assert _ask().text == "answer"
    row = _row(settings)
    assert (row.rate_limits, row.paused_until, row.rate_limit_hits) == (0, None, 1)
    assert ratelimit.current() is None


def test_without_a_named_wait_the_pause_backs_off_and_is_bounded(fake_openai: Any, settings: Any) -> None:
    settings.LLM_RATE_LIMIT_BACKOFF = 2.0
    settings.LLM_RATE_LIMIT_MAX_PAUSE = 5.0
    waits = []
    for _ in range(4):
        fake_openai.script(Reply(status=429))
        _expire(settings)
        with pytest.raises(llm.LLMRateLimited) as info:
            _ask()
        waits.append(round(info.value.retry_after or 0))
    assert waits == [2, 4, 5, 5]
    assert ratelimit.pause_seconds(3600.0, 1) == 5.0  # a named wait is capped too


def test_a_503_naming_retry_after_is_a_rate_limit_and_one_without_is_an_outage(fake_openai: Any, settings: Any) -> None:
    fake_openai.script(Reply(status=503, headers={"Retry-After": "10"}))
    with pytest.raises(llm.LLMRateLimited) as info:
        _ask()
    assert not info.value.outage and _row(settings).failures == 0
    LLMBreaker.objects.filter(pk=settings.LLM_BASE_URL).update(rate_limits=0, paused_until=None)
    fake_openai.script(Reply(status=503))
    with pytest.raises(llm.TransientLLMError) as outage:
        _ask()
    assert outage.value.outage and not isinstance(outage.value, llm.LLMRateLimited)
    assert _row(settings).failures == 1


def test_a_429_neither_opens_nor_resets_the_breaker(fake_openai: Any, settings: Any) -> None:
    settings.LLM_BREAKER_THRESHOLD = 3
    fake_openai.script(Reply(status=503), Reply(status=503), Reply(status=429), Reply(status=503))
    for _ in range(2):
        with pytest.raises(llm.TransientLLMError):
            _ask()
    with pytest.raises(llm.LLMRateLimited):
        _ask()
    assert _row(settings).failures == 2  # the 429 did not reset the count, as an answer would
    _expire(settings)
    with pytest.raises(llm.TransientLLMError):
        _ask()  # the trial meets the outage: the third failure opens the breaker
    assert _row(settings).state == BreakerState.OPEN


def test_the_pause_shows_on_readyz_overview_queue_and_metrics(
    fake_openai: Any, settings: Any, client: Any, client_as: Any, alice: Any
) -> None:
    fake_openai.script(Reply(status=429, headers={"Retry-After": "120"}, error_message="quota <b>exceeded</b>"))
    with pytest.raises(llm.LLMRateLimited):
        _ask()
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "degraded"
    assert ready.json()["checks"]["llm"]["detail"].startswith("degraded: LLM rate-limited until")
    page = client_as(alice)
    overview = page.get("/").content.decode()
    assert 'id="llm-rate-limit"' in overview and "quota &lt;b&gt;exceeded&lt;/b&gt;" in overview
    assert 'class="banner error" id="llm-rate-limit"' in page.get("/queue/").content.decode()
    metrics = client.get("/metrics").content.decode()
    assert "lessonboard_llm_rate_limited 1.0" in metrics
    assert "lessonboard_llm_rate_limits_total" in metrics
    LLMBreaker.objects.filter(pk=settings.LLM_BASE_URL).update(rate_limits=0, paused_until=None)
    assert client.get("/readyz").json()["checks"]["llm"]["ok"] is True
    assert "lessonboard_llm_rate_limited 0.0" in client.get("/metrics").content.decode()


def test_a_review_answers_503_with_the_seconds_left_while_paused_and_after_meeting_a_429(
    fake_openai: Any, settings: Any, api: Any
) -> None:
    from lessons.review.models import ReviewRun

    fake_openai.script(Reply(status=429, headers={"Retry-After": "40"}))
    response = api.post("/api/v1/reviews", {"summary": "did work", "workspace": "acme"})
    assert response.status_code == 503 and 39 <= int(response["Retry-After"]) <= 40  # its own call met the 429
    assert ReviewRun.objects.count() == 1 and len(fake_openai.chat_requests()) == 1
    again = api.post("/api/v1/reviews", {"summary": "did more work", "workspace": "acme"})
    assert again.status_code == 503 and again.json()["error"].startswith("LLM rate-limited until")
    assert ReviewRun.objects.count() == 1 and len(fake_openai.chat_requests()) == 1  # nothing was tried


def test_a_refine_run_that_meets_the_pause_goes_back_to_the_queue(fake_openai: Any, settings: Any) -> None:
    from refine import runs
    from refine.models import RefineRun, RunStatus

    fake_openai.script(Reply(status=429, headers={"Retry-After": "20"}))
    run = RefineRun.objects.create(task="deploy", original_draft="draft " * 40, agent="coder", max_passes=1)
    result = runs.execute_run(run.pk)
    assert result is not None and result.status == RunStatus.QUEUED and result.pass_count == 0
    assert result.error.startswith("waiting: LLM rate-limited until")


def test_the_backoff_stays_at_its_cap_however_long_the_storm(settings: Any) -> None:
    """A provider that answers 429 without a wait, 2,000 times in a row: the pause is the cap (the
    doubling overflowed a float at the 1,025th)."""
    assert ratelimit.pause_seconds(None, 2000) == settings.LLM_RATE_LIMIT_MAX_PAUSE
    assert ratelimit.pause_seconds(None, 1) == settings.LLM_RATE_LIMIT_BACKOFF
