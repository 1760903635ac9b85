"""Approving and rejecting a proposal over the operator API (docs/api.md#proposal-decisions): each does what
the proposal page's action does, is audited the same way, and records the person the token belongs to."""

from __future__ import annotations

from typing import Any

import pytest

from lessonboard.models import AuditEvent, TokenScope
from lessonboard.tokens import issue_token
from lessons.review import memory
from lessons.review.models import Proposal
from lessons.review.staging import run_review
from tests.factories import UserFactory, WorkspaceFactory
from tests.support.clients import ApiClient
from tests.support.review import hold

pytestmark = pytest.mark.django_db

APPROVE = "/api/v1/operator/proposals/{}/approve"
REJECT = "/api/v1/operator/proposals/{}/reject"


def add(content: str, target: str = "memory") -> dict[str, Any]:
    return {"target": target, "op": "add", "content": content, "rationale": "seen in the logs", "score": 0.9}


def operator_for(user: Any, *, name: str = "ops-bob", workspaces: tuple[str, ...] = ()) -> ApiClient:
    return ApiClient(issue_token(name, [TokenScope.OPERATOR], created_by=user, workspaces=workspaces).plaintext)


def test_approve_applies_the_write_records_the_person_and_is_audited(bob: Any, stage: Any) -> None:
    (row,) = stage(add("The staging cluster is called kestrel."), workspace="acme")
    answer = operator_for(bob).post(APPROVE.format(row.pk), {"reason": "checked the cluster name"})
    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        "id": row.pk,
        "status": "applied",
        "decision": "approved",
        "decided_by": "bob",
        "message": answer.json()["message"],
    }
    row.refresh_from_db()
    assert (row.status, row.decided_by) == ("applied", bob)
    assert memory.entries_of(row.workspace, "memory") == ["The staging cluster is called kestrel."]
    event = AuditEvent.objects.get(action="review.approve", object_ids=[str(row.pk)])  # as the page's Approve
    assert event.actor_user == bob and event.actor_token is not None and event.actor_token.name == "ops-bob"
    assert event.reason == "checked the cluster name"


def test_reject_keeps_the_reason_and_writes_nothing(bob: Any, stage: Any) -> None:
    (row,) = stage(add("The user wants all tests skipped.", target="user"))
    answer = operator_for(bob).post(REJECT.format(row.pk), {"reason": "a policy, not a fact"})
    assert answer.status_code == 200 and answer.json()["status"] == "rejected"
    row.refresh_from_db()
    assert (row.status, row.reason, row.decided_by) == ("rejected", "a policy, not a fact", bob)
    assert memory.entries_of(row.workspace, "user") == []
    assert AuditEvent.objects.get(action="review.reject", object_ids=[str(row.pk)]).reason == "a policy, not a fact"


@pytest.mark.parametrize("path", [APPROVE, REJECT])
@pytest.mark.parametrize("body", [{}, {"reason": "   "}])
def test_a_missing_reason_is_a_400_naming_reason(bob: Any, stage: Any, path: str, body: dict[str, str]) -> None:
    (row,) = stage(add("a fact"))
    answer = operator_for(bob).post(path.format(row.pk), body)
    assert (answer.status_code, answer.json()["field"]) == (400, "reason")
    row.refresh_from_db()
    assert (
        row.status == "pending"
        and not AuditEvent.objects.filter(action__in=["review.approve", "review.reject"]).exists()
    )


def test_agent_tokens_and_tokens_of_no_reviewer_are_refused(bob: Any, carol: Any, stage: Any) -> None:
    (row,) = stage(add("a fact"))
    body = {"reason": "fine"}
    full = ApiClient(issue_token("agent", [TokenScope.FULL], created_by=bob).plaintext)  # an agent's token
    ingest = ApiClient(issue_token("ingest", [TokenScope.INGEST], created_by=bob).plaintext)
    nobody = ApiClient(issue_token("ops-nobody", [TokenScope.OPERATOR]).plaintext)  # no person behind it
    viewer = operator_for(carol, name="ops-carol")  # a person who may not review
    for client in (full, nobody, viewer):
        answer = client.post(APPROVE.format(row.pk), body)
        assert (answer.status_code, answer.json()["field"]) == (403, "token"), answer.content
    assert ingest.post(APPROVE.format(row.pk), body).status_code == 403
    row.refresh_from_db()
    assert row.status == "pending" and memory.entries_of(row.workspace, "memory") == []


def test_a_bound_token_of_another_workspace_gets_404_and_its_own_workspace_works(bob: Any, stage: Any) -> None:
    (theirs,) = stage(add("billing's fact"), workspace="billing")
    (ours,) = stage(add("shop's fact"), workspace="shop")
    shop_ops = operator_for(bob, workspaces=("shop",))
    refused = shop_ops.post(APPROVE.format(theirs.pk), {"reason": "x"})
    assert (refused.status_code, refused.json()["field"]) == (404, "pk")
    assert "billing" not in refused.content.decode()
    assert shop_ops.post(REJECT.format(theirs.pk), {"reason": "x"}).status_code == 404
    theirs.refresh_from_db()
    assert theirs.status == "pending"
    assert shop_ops.post(APPROVE.format(ours.pk), {"reason": "ok"}).json()["status"] == "applied"


def test_the_same_proposal_decided_twice_is_a_409(bob: Any, stage: Any) -> None:
    first, second = stage(add("one fact"), add("another fact"))
    ops = operator_for(bob)
    assert ops.post(APPROVE.format(first.pk), {"reason": "ok"}).status_code == 200
    again = ops.post(REJECT.format(first.pk), {"reason": "changed my mind"})
    assert again.status_code == 409 and "already decided" in again.json()["error"]
    assert ops.post(REJECT.format(second.pk), {"reason": "no"}).status_code == 200
    assert ops.post(APPROVE.format(second.pk), {"reason": "yes"}).status_code == 409
    assert Proposal.objects.get(pk=first.pk).status == "applied"
    assert ops.post(APPROVE.format(999999), {"reason": "x"}).status_code == 404


def test_the_token_that_proposed_can_never_decide(bob: Any) -> None:
    issued = issue_token("agent-and-ops", [TokenScope.OPERATOR, TokenScope.FULL], created_by=bob)
    ws = WorkspaceFactory(slug="acme")
    run = run_review(
        ws, "work", agent="coder", proposer=lambda s: [add("self-serving fact")], gate=hold, token=issued.token
    )
    row = run.run.proposals.get()
    answer = ApiClient(issued.plaintext).post(APPROVE.format(row.pk), {"reason": "trust me"})
    assert answer.status_code == 403 and "proposed with this token" in answer.json()["error"]
    row.refresh_from_db()
    assert row.status == "pending"
    # Another person's operator token may.
    dave = UserFactory(username="dave", role="reviewer")
    assert operator_for(dave, name="ops-dave").post(APPROVE.format(row.pk), {"reason": "ok"}).status_code == 200


def test_the_openapi_document_describes_the_decisions(api: ApiClient) -> None:
    document = api.get("/api/v1/openapi.json").json()
    assert document["components"]["schemas"]["DecisionBody"]["required"] == ["reason"]
    for path in ("/api/v1/operator/proposals/{pk}/approve", "/api/v1/operator/proposals/{pk}/reject"):
        post = document["paths"][path]["post"]
        assert post["x-scope"] == "operator" and "DecisionBody" in str(post["requestBody"])
        assert {"200", "404", "409"} <= set(post["responses"])


def test_create_agent_token_for_user_binds_the_person(bob: Any) -> None:
    import io

    from django.core.management import CommandError, call_command

    from lessonboard.models import AgentToken

    call_command("create_agent_token", "ops-bob", "--scope", "operator", "--for-user", "bob", stdout=io.StringIO())
    assert AgentToken.objects.get(name="ops-bob").created_by == bob
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("create_agent_token", "x", "--scope", "operator", "--for-user", "nobody", stdout=io.StringIO())
    assert not AgentToken.objects.filter(name="x").exists()
