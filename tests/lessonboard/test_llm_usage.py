"""Every LLM call recorded (lessonboard/llm/usage.py): one row per call for each purpose, tokens from usage
or estimated and marked so, cost from the price table, the counters on /metrics, the pages, retention."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from lessonboard import llm
from lessonboard.llm import usage
from lessonboard.models import LLMCall
from tests.fakes.openai_server import Reply
from tests.support.queue import LESSON

pytestmark = pytest.mark.django_db


@pytest.fixture
def priced(settings: Any) -> Any:
    settings.LLM_PRICES = ["fake-model=2/10", "*=1/1"]
    return settings


@pytest.mark.usefixtures("queue_dir")
def test_a_lesson_job_records_its_call_with_job_workspace_agent_and_prompt(
    priced: Any, fake_openai: Any, client_as: Any, carol: Any
) -> None:
    from lessonq import processing
    from lessonq.ingest import LessonRequest, enqueue

    fake_openai.script(Reply(text=LESSON, prompt_tokens=1000, completion_tokens=200))
    request = LessonRequest(task="Edit main.go", attempt="a", outcome="ERROR: x", trigger="error")
    job_id = enqueue(request, agent="coder", workspace="proj").job_id
    assert processing.process(job_id) == "success"
    [call] = LLMCall.objects.all()
    assert (call.purpose, call.model, call.workspace, call.agent, call.job_id) == (
        "lesson",
        "fake-model",
        "proj",
        "coder",
        job_id,
    )
    assert (call.prompt_tokens, call.completion_tokens, call.tokens_estimated, call.outcome) == (1000, 200, False, "ok")
    assert (call.prompt_name, call.prompt_version) == ("lesson", "lesson-v1")
    assert call.cost == Decimal("0.004")  # 1000 × 2/1M + 200 × 10/1M
    page = client_as(carol).get(f"/queue/jobs/{job_id}/").content.decode()
    assert 'id="job-llm-calls"' in page and f'data-llm-call="{call.pk}"' in page


def test_a_server_without_usage_gets_estimated_tokens_marked_so(priced: Any, fake_openai: Any) -> None:
    fake_openai.script(Reply(text="x" * 400, usage=False))
    with usage.context(purpose="other"):
        llm.chat([{"role": "user", "content": "y" * 800}])
    call = LLMCall.objects.get()
    assert call.tokens_estimated and (call.prompt_tokens, call.completion_tokens) == (200, 100)
    assert call.cost == Decimal("0.0014")  # 200 × 2/1M + 100 × 10/1M


@pytest.mark.parametrize(
    ("sent", "tokens"),
    [
        ({}, (200, 100)),  # nothing known: the estimate, as for no usage at all
        ({"prompt_tokens": None, "completion_tokens": None}, (200, 100)),
        ({"total_tokens": 600}, (400, 200)),  # the total kept, split 2:1 as the estimate splits it
        ({"prompt_tokens": 150, "total_tokens": 400}, (150, 250)),  # the missing count is the rest of it
        ({"completion_tokens": 50}, (200, 50)),  # the count sent kept, the other estimated
    ],
)
def test_a_usage_without_both_counts_is_estimated_and_keeps_what_it_says(
    priced: Any, fake_openai: Any, sent: dict[str, Any], tokens: tuple[int, int]
) -> None:
    body = {
        "id": "chatcmpl-usage",
        "object": "chat.completion",
        "created": 0,
        "model": fake_openai.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * 400}, "finish_reason": "stop"}],
        "usage": sent,
    }
    fake_openai.script(Reply(body=json.dumps(body)))
    with usage.context(purpose="other"):
        llm.chat([{"role": "user", "content": "y" * 800}])  # estimated: 200 prompt, 100 completion tokens
    call = LLMCall.objects.get()
    assert call.tokens_estimated and (call.prompt_tokens, call.completion_tokens) == tokens
    assert call.cost == (2 * tokens[0] + 10 * tokens[1]) / Decimal(1_000_000)  # "fake-model=2/10"


def test_a_call_answered_under_a_dated_name_is_priced_as_the_model_asked_for(
    priced: Any, fake_openai: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(fake_openai, "model", "fake-model-2024-08-06")  # as OpenAI answers "gpt-4o" calls
    fake_openai.script(Reply(text="hi", prompt_tokens=1000, completion_tokens=200))
    with usage.context(purpose="other"):
        result = llm.chat([{"role": "user", "content": "hi"}])
    assert fake_openai.chat_requests()[-1].json["model"] == "fake-model"
    assert result.model == "fake-model-2024-08-06"
    call = LLMCall.objects.get()
    assert call.model == "fake-model-2024-08-06"  # the row keeps the model that answered
    assert call.cost == Decimal("0.004")  # at "fake-model=2/10", not "*=1/1" (0.0012)


def test_a_price_of_the_answering_model_comes_first_then_the_one_asked_for_then_star(settings: Any) -> None:
    settings.LLM_PRICES = ["gpt-4o=2.5/10", "gpt-4o-2024-11-20=2/8", "*=1/1"]
    assert usage.cost("gpt-4o-2024-08-06", 1000, 100, asked="gpt-4o") == Decimal("0.0035")
    assert usage.cost("gpt-4o-2024-11-20", 1000, 100, asked="gpt-4o") == Decimal("0.0028")
    assert usage.cost("llama-3-8b-q4", 1000, 100, asked="llama-3-8b") == Decimal("0.0011")
    settings.LLM_PRICES = ["gpt-4o=2.5/10"]
    assert usage.cost("llama-3-8b-q4", 1000, 100, asked="llama-3-8b") == 0


def test_review_hyde_refine_and_probe_calls_are_recorded_with_their_purpose(
    priced: Any, fake_openai: Any, api: Any, settings: Any
) -> None:
    from lessonboard import breaker
    from lessonboard.models import BreakerState, LLMBreaker
    from lessons.retrieval import hypothetical_lesson
    from refine import runs
    from refine.models import RefineRun

    fake_openai.script(Reply(text='{"proposals": []}'))
    assert api.post("/api/v1/reviews", {"summary": "did work", "workspace": "acme", "agent": "bot"}).status_code == 200
    fake_openai.script("LESSON: a\nMISTAKE: b\nCORRECTION: c")
    hypothetical_lesson("a task", workspace="acme")
    fake_openai.script("<critique>\n- fine\n</critique>\n<revised>\n" + "draft " * 40 + "\n</revised>")
    from lessonboard.models import Workspace

    acme = Workspace.objects.for_slug("acme")
    run = RefineRun.objects.create(
        task="deploy", original_draft="draft " * 40, agent="coder", max_passes=1, workspace=acme
    )
    runs.execute_run(run.pk, checker=None)
    LLMBreaker.objects.create(endpoint=settings.LLM_BASE_URL, state=BreakerState.OPEN, probe_at=timezone.now())
    assert breaker.probe() == "closed"
    rows = {c.purpose: c for c in LLMCall.objects.all()}
    assert set(rows) == {"review", "hyde", "refine", "probe"}
    assert (rows["review"].workspace, rows["review"].agent, rows["review"].prompt_version) == (
        "acme",
        "bot",
        "propose-v1",
    )
    assert rows["hyde"].workspace == "acme" and rows["refine"].refine_run_id == run.pk
    assert rows["refine"].agent == "coder" and rows["probe"].prompt_name == "ping"
    assert rows["refine"].workspace == "acme"  # the run's workspace: the usage page groups spend by it


def test_the_review_models_score_of_an_mcp_proposal_counts_against_its_workspace(
    fake_openai: Any, settings: Any
) -> None:
    from console.mcp import tools
    from lessonboard.models import Workspace
    from lessonboard.tokens import issue_token

    Workspace.objects.for_slug("acme")
    token = issue_token("agent-acme", ["full"], workspaces=["acme"]).token
    fake_openai.script(Reply(text='{"score": 0.9, "reason": "a fact"}'), Reply(text='{"proposals": []}'))
    bound = tools.current_token.set(token)
    try:
        tools._propose.func(  # the tool's body, in this thread (the MCP endpoint runs it in a worker thread)
            {"target": "memory", "op": "add", "content": "The staging cluster is kestrel.", "score": 0.5}, "acme", "bot"
        )
    finally:
        tools.current_token.reset(bound)
    score = LLMCall.objects.get(prompt_name="score")
    assert (score.purpose, score.workspace, score.agent) == ("review", "acme", "bot")


def test_failed_calls_are_recorded_and_refused_ones_are_not(fake_openai: Any) -> None:
    fake_openai.script(Reply(status=400, error_message="context too long"), Reply(status=429))
    for _ in range(3):  # a 400, a 429, then a call the pause refuses before it is made
        with pytest.raises(llm.LLMError):
            llm.chat([{"role": "user", "content": "hi"}])
    assert [c.outcome for c in LLMCall.objects.order_by("created_at")] == ["error", "rate_limited"]


def test_metrics_usage_page_and_retention(
    priced: Any, fake_openai: Any, client: Any, client_as: Any, carol: Any
) -> None:
    fake_openai.script(Reply(text="hello", prompt_tokens=10, completion_tokens=5))
    with usage.context(purpose="review", workspace="acme", agent="bot"):
        llm.chat([{"role": "user", "content": "hi"}])
    metrics = client.get("/metrics").content.decode()
    assert 'lessonboard_llm_calls_total{model="fake-model",outcome="ok",purpose="review"}' in metrics
    assert 'lessonboard_llm_tokens_total{kind="prompt",model="fake-model",purpose="review"}' in metrics
    assert "lessonboard_llm_cost_total" in metrics
    page = client_as(carol).get("/usage/").content.decode()
    assert '<span data-usage="calls">1</span>' in page and '<span data-usage="prompt">10</span>' in page
    assert "acme" in page and "bot" in page
    LLMCall.objects.update(created_at=timezone.now() - timedelta(days=100))
    assert usage.purge() == 1 and not LLMCall.objects.exists()
