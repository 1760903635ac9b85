import json

import pytest

from lessons.review import memory
from lessons.review.models import Proposal, ReviewRun
from tests.fakes.openai_server import Reply

pytestmark = pytest.mark.django_db


def reply(*proposals):
    return Reply(text=json.dumps({"proposals": list(proposals)}))


def test_it_runs_the_pass_through_the_fake_llm_and_returns_four_buckets(api, fake_openai, settings):
    settings.MEMORY_CHAR_LIMIT = 40
    fake_openai.script(
        reply(
            {"target": "memory", "op": "add", "content": "tests run with lb.py test", "rationale": "r", "score": 0.9},
            {"target": "memory", "op": "add", "content": "maybe uses tox", "rationale": "r", "score": 0.3},
            {"target": "memory", "op": "add", "content": "x" * 30, "rationale": "r", "score": 0.95},
            {"target": "user", "op": "remove", "old_text": "Ana", "rationale": "r", "score": 0.9},
        )
    )
    response = api.post("/api/v1/reviews", {"summary": "fixed the test runner", "workspace": "acme", "agent": "coder"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert [i["proposal"]["content"] for i in body["applied"]] == ["tests run with lb.py test"]
    assert body["applied"][0]["reason"] == "Entry added."
    assert body["rejected"][0]["reason"] == "score 0.30 is below the threshold 0.70"
    assert body["failed"][0]["reason"].startswith("Memory at 25/40 chars.")
    assert body["pending"][0]["proposal"] == {
        "id": body["pending"][0]["id"],
        "target": "user",
        "op": "remove",
        "rationale": "r",
        "score": 0.9,
        "old_text": "Ana",
    }
    run = ReviewRun.objects.get(pk=body["run"])
    assert run.model == fake_openai.model and run.prompt_version == "propose-v1"
    assert json.loads(run.raw_output)["proposals"][0]["score"] == 0.9
    # the prompt carried the summary and the target budgets
    request = fake_openai.chat_requests()[-1]
    assert "fixed the test runner" in request.json["messages"][1]["content"]
    assert "40 characters" in request.json["messages"][0]["content"]


def test_a_malformed_llm_reply_fails_the_pass_with_502_and_keeps_the_raw_output(api, fake_openai):
    fake_openai.script(Reply(text="Sure! Here are my proposals: add a note"))
    response = api.post("/api/v1/reviews", {"summary": "did work", "workspace": "acme"})
    assert response.status_code == 502
    assert response.json()["stage"] == "proposer"
    assert "not JSON" in response.json()["error"]
    run = ReviewRun.objects.get()
    assert run.status == "error" and run.raw_output == "Sure! Here are my proposals: add a note"


def test_a_garbled_http_body_from_the_provider_fails_the_pass(api, fake_openai):
    fake_openai.script(Reply(body="{garbled"))
    response = api.post("/api/v1/reviews", {"summary": "did work", "workspace": "acme"})
    assert response.status_code == 502
    assert response.json()["error"].startswith("proposer LLM call failed")


def test_an_invalid_proposal_from_the_model_fails_but_earlier_writes_stay(api, fake_openai):
    fake_openai.script(
        reply(
            {"target": "memory", "op": "add", "content": "first", "rationale": "r", "score": 0.9},
            {"target": "memory", "op": "add", "content": "second", "score": 7},
        )
    )
    response = api.post("/api/v1/reviews", {"summary": "did work", "workspace": "acme"})
    assert response.status_code == 502
    body = response.json()
    assert body["error"].startswith("Invalid review proposal: ") and body["stage"] == "proposal"
    assert [i["proposal"]["content"] for i in body["applied"]] == ["first"]
    assert Proposal.objects.count() == 1


def test_a_blank_summary_is_an_empty_outcome_without_an_llm_call(api, fake_openai):
    response = api.post("/api/v1/reviews", {"summary": "   ", "workspace": "acme"})
    assert response.status_code == 200
    assert {k: response.json()[k] for k in ("applied", "rejected", "failed", "pending")} == {
        "applied": [],
        "rejected": [],
        "failed": [],
        "pending": [],
    }
    assert fake_openai.chat_requests() == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"summary": "x"}, "workspace"),
        ({"summary": "x", "workspace": "Bad Slug"}, "workspace"),
        ({"summary": 3, "workspace": "a"}, "summary"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api, body, field):
    response = api.post("/api/v1/reviews", body)
    assert response.status_code == 400 and response.json()["field"] == field


def test_it_serves_the_rendered_snapshot(api):
    from tests.factories import WorkspaceFactory

    ws = WorkspaceFactory(slug="acme")
    memory.apply_op(ws, "memory", "add", content="uses pnpm")
    body = api.get("/api/v1/memory/memory", {"workspace": "acme"}).json()
    assert body["snapshot"].split("\n")[1] == "MEMORY (your personal notes) [0% — 9/2,200 chars]"
    assert body["entries"] == ["uses pnpm"] and body["usage"] == "0% — 9/2,200 chars"
    assert api.get("/api/v1/memory/user", {"workspace": "acme"}).json()["snapshot"] == ""
    assert api.get("/api/v1/memory/notes", {"workspace": "acme"}).status_code == 404
    assert api.get("/api/v1/memory/user", {}).json()["field"] == "workspace"


def test_the_api_needs_a_full_token(agent_token):
    from tests.support.clients import ApiClient

    ingest = ApiClient(agent_token("ingest-only", "ingest"))
    assert ingest.post("/api/v1/reviews", {"summary": "x", "workspace": "a"}).status_code == 403
    assert ingest.get("/api/v1/memory/memory", {"workspace": "a"}).status_code == 403


def test_the_pass_shows_up_in_metrics(api, fake_openai, client):
    # A user-file add waits for a person under the default gates (docs/reviews.md#who-scores): pending.
    fake_openai.script(reply({"target": "user", "op": "add", "content": "Ana", "rationale": "r", "score": 0.8}))
    api.post("/api/v1/reviews", {"summary": "met Ana", "workspace": "metrics-ws"})
    text = client.get("/metrics").content.decode()
    assert 'lessonboard_review_proposals_total{bucket="pending",target="user"}' in text
