"""The operator's actions over the JSON API under the ``operator`` scope (docs/api.md#operator-api): each
does what its page action does and is audited with the token as the actor."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lessonboard import pauses
from lessonboard.models import AuditEvent, QueuePause
from lessonq.models import Job, JobState
from lessonq.triage.models import BulkAction
from tests.support.clients import ApiClient

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops(agent_token: Callable[..., str]) -> ApiClient:
    return ApiClient(agent_token("ops-bot", "operator"))


@pytest.fixture(autouse=True)
def no_cached_pauses() -> Iterator[None]:
    pauses.forget()
    yield
    pauses.forget()


def test_it_lists_the_dlq_with_the_pages_filters_and_refuses_other_scopes(
    ops: ApiClient, jobs: Any, agent_token: Callable[..., str]
) -> None:
    mine = jobs(agent="deployer", task="deploy the thing")
    jobs(agent="coder")
    jobs(state=JobState.SUCCEEDED, agent="deployer")
    answer = ops.get("/api/v1/operator/dlq", {"agent": "deployer"})
    assert answer.status_code == 200
    body = answer.json()
    assert [j["id"] for j in body["jobs"]] == [mine.pk] and body["jobs"][0]["state"] == "dead"
    assert body["filter"] == {"tab": "dead", "agent": "deployer"} and body["next"] is None
    assert ops.get("/api/v1/operator/dlq", {"newer": "forever"}).json()["field"] == "newer"
    ingest = ApiClient(agent_token("agent", "ingest"))
    assert ingest.get("/api/v1/operator/dlq").status_code == 403


def test_retry_and_purge_act_and_are_audited_with_the_token(ops: ApiClient, jobs: Any) -> None:
    one, two = jobs(), jobs()
    retried = ops.post(f"/api/v1/operator/dlq/{one.pk}/retry", {"reason": "provider back"})
    assert retried.status_code == 200 and retried.json() == {"job_id": one.pk, "state": "pending"}
    event = AuditEvent.objects.get(action="queue.dlq_retry", object_ids=[one.pk])  # as the page's Retry
    assert event.result["actor"] == "token:ops-bot" and event.reason == "provider back"
    purged = ops.post(f"/api/v1/operator/dlq/{two.pk}/purge", {})
    assert purged.status_code == 200 and Job.objects.get(pk=two.pk).state == JobState.PURGED
    assert AuditEvent.objects.filter(action="queue.dlq_purge", object_ids=[two.pk]).exists()
    again = ops.post(f"/api/v1/operator/dlq/{two.pk}/purge", {})
    assert again.status_code == 409 and "not dead" in again.json()["error"]
    assert ops.post("/api/v1/operator/dlq/0123456789abcdef/retry", {}).status_code == 404


def test_a_bulk_action_previews_first_and_starts_only_when_confirmed(ops: ApiClient, jobs: Any) -> None:
    for _ in range(3):
        jobs(agent="deployer")
    jobs(agent="coder")
    flt = {"agent": "deployer"}
    preview = ops.post("/api/v1/operator/dlq/bulk", {"kind": "retry", "filter": flt})
    assert preview.status_code == 200
    assert preview.json()["matched"] == 3 and preview.json()["will_run"] == 3 and "bulk_id" not in preview.json()
    assert not BulkAction.objects.exists()
    started = ops.post("/api/v1/operator/dlq/bulk", {"kind": "retry", "filter": flt, "confirm": True})
    assert started.status_code == 202
    action = BulkAction.objects.get(pk=started.json()["bulk_id"])
    assert action.total == 3 and action.filter == {"tab": "dead", "agent": "deployer"}
    assert AuditEvent.objects.filter(action="queue.bulk_start", object_ids=[str(action.pk)]).exists()
    bad = ops.post("/api/v1/operator/dlq/bulk", {"kind": "explode"})
    assert bad.status_code == 400 and bad.json()["field"] == "kind"


def test_pause_and_resume_over_the_api(ops: ApiClient) -> None:
    paused = ops.post("/api/v1/operator/queues/refine/pause", {"reason": "drift"})
    assert paused.json() == {"queue": "refine", "paused": True, "changed": True}
    row = QueuePause.objects.get(name="refine")
    assert row.paused_by_token is not None and row.paused_by_token.name == "ops-bot" and row.reason == "drift"
    assert pauses.reason("refine").startswith("paused: queue refine, by token ops-bot")
    assert AuditEvent.objects.filter(action="queue.pause", actor_token=row.paused_by_token).exists()
    resumed = ops.post("/api/v1/operator/queues/refine/resume", {})
    assert resumed.json()["changed"] is True and not QueuePause.objects.exists()
    assert ops.post("/api/v1/operator/queues/nope/pause", {}).status_code == 404


def test_the_openapi_document_describes_the_operator_api(ops: ApiClient, api: ApiClient) -> None:
    assert ops.get("/api/v1/operator/dlq").status_code == 200
    paths = api.get("/api/v1/openapi.json").json()["paths"]
    assert {
        "/api/v1/operator/dlq",
        "/api/v1/operator/dlq/bulk",
        "/api/v1/operator/dlq/{job_id}/retry",
        "/api/v1/operator/dlq/{job_id}/purge",
        "/api/v1/operator/queues/{name}/pause",
        "/api/v1/operator/queues/{name}/resume",
    } <= set(paths)
    assert paths["/api/v1/operator/dlq/bulk"]["post"]["x-scope"] == "operator"


def test_a_token_bound_to_workspaces_may_not_use_the_deployment_wide_operator_api() -> None:
    from lessonboard.models import TokenScope
    from lessonboard.tokens import issue_token

    bound = ApiClient(issue_token("ops-a", [TokenScope.OPERATOR], workspaces=["ws-a"]).plaintext)
    for answer in (
        bound.get("/api/v1/operator/dlq", {"workspace": "ws-b"}),
        bound.post("/api/v1/operator/queues/llm/pause", {"reason": "x"}),
        bound.post("/api/v1/operator/dlq/bulk", {"kind": "purge", "filter": {}}),
    ):
        assert answer.status_code == 403 and answer.json()["field"] == "token", answer.content
    assert not QueuePause.objects.exists()
