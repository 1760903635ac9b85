"""Per-workspace review-gate rules, set from the workspace's gate page (docs/reviews.md#workspace-rules)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from lessonboard.models import AuditEvent, TokenScope
from lessonboard.tokens import issue_token
from lessons.review import memory
from lessons.review.gates import set_workspace_gates
from lessons.review.models import WorkspaceGates
from lessons.review.staging import run_review
from tests.factories import WorkspaceFactory

pytestmark = pytest.mark.django_db


def write(target: str, op: str = "add", score: float = 0.9, **extra: str) -> dict[str, Any]:
    return {"target": target, "op": op, "content": extra.get("content", f"a {target} fact"), "rationale": "r",
            "score": score, **({"old_text": extra["old_text"]} if "old_text" in extra else {})}  # fmt: skip


def status_of(workspace: Any, raw: dict[str, Any]) -> str:
    """One real review pass with the gate the server picks for ``workspace``: the proposal's bucket."""
    result = run_review(workspace, "work", agent="coder", proposer=lambda s: [raw])
    assert result.error is None
    return result.run.proposals.get().status


def test_the_defaults_are_todays_rules() -> None:
    ws = WorkspaceFactory(slug="acme")
    assert status_of(ws, write("memory")) == "applied"
    assert status_of(ws, write("memory", score=0.5, content="another fact")) == "rejected"
    assert status_of(ws, write("user")) == "pending"
    assert status_of(ws, write("memory", "remove", old_text="a memory fact")) == "pending"


def test_a_looser_rule_lets_a_user_file_write_and_a_remove_apply(admin_user: Any) -> None:
    ws = WorkspaceFactory(slug="acme")
    set_workspace_gates(ws, rules={"user.add": "auto", "memory.remove": "auto"}, threshold=None, user=admin_user)
    assert status_of(ws, write("user")) == "applied"
    assert memory.entries_of(ws, "user") == ["a user fact"]
    assert status_of(ws, write("user", score=0.6, content="weak")) == "rejected"  # auto: below the threshold
    status_of(ws, write("memory"))
    assert status_of(ws, write("memory", "remove", old_text="a memory fact")) == "applied"
    assert memory.entries_of(ws, "memory") == []


def test_a_stricter_rule_makes_a_memory_add_wait_and_a_threshold_is_the_workspaces(admin_user: Any) -> None:
    ws = WorkspaceFactory(slug="acme")
    set_workspace_gates(ws, rules={"memory.add": "human"}, threshold=None, user=admin_user)
    result = run_review(ws, "work", agent="coder", proposer=lambda s: [write("memory", score=1.0)])
    row = result.run.proposals.get()
    assert row.status == "pending" and "workspace rule memory.add=human" in row.gate_reason
    assert memory.entries_of(ws, "memory") == []
    set_workspace_gates(ws, rules={}, threshold=0.95, user=admin_user)  # back to the server's gate, stricter score
    assert status_of(ws, write("memory", score=0.9, content="nearly sure")) == "rejected"
    assert status_of(ws, write("memory", score=0.96, content="sure")) == "applied"


def test_one_workspaces_rules_do_not_apply_in_another(admin_user: Any) -> None:
    loose, other = WorkspaceFactory(slug="loose"), WorkspaceFactory(slug="other")
    set_workspace_gates(loose, rules={"user.add": "auto"}, threshold=0.1, user=admin_user)
    assert status_of(other, write("user")) == "pending"
    assert status_of(other, write("memory", score=0.5)) == "rejected"


def test_an_admin_edits_the_rules_on_the_page_and_the_edit_is_audited_before_and_after(
    admin_user: Any, client_as: Any
) -> None:
    ws = WorkspaceFactory(slug="acme")
    client = client_as(admin_user)
    page = client.get("/reviews/gates/acme/").content.decode()
    assert "waits for a person" in page and 'name="user.add"' in page and "csrfmiddlewaretoken" in page
    saved = client.post("/reviews/gates/acme/save", {"user.add": "auto", "memory.add": "human", "threshold": "0.8"})
    assert saved.status_code == 302
    row = WorkspaceGates.objects.get(workspace=ws)
    assert (row.rules, row.threshold, row.updated_by) == ({"memory.add": "human", "user.add": "auto"}, 0.8, admin_user)
    event = AuditEvent.objects.get(action="review.gates")
    assert event.actor_user == admin_user and event.object_ids == [str(ws.pk)]
    assert event.result["before"] == {"rules": {}, "threshold": None}
    assert event.result["after"] == {"rules": {"memory.add": "human", "user.add": "auto"}, "threshold": 0.8}
    shown = client.get("/reviews/gates/acme/").content.decode()
    assert "this workspace (auto)" in shown and "applies on its own at score ≥ 0.80" in shown

    # A bad value changes nothing and says which field.
    bad = client.post("/reviews/gates/acme/save", {"user.add": "always", "threshold": "0.8"}, follow=True)
    assert "user.add" in bad.content.decode() and "nothing was changed" in bad.content.decode()
    assert client.post("/reviews/gates/acme/save", {"threshold": "2"}, follow=True).status_code == 200
    row.refresh_from_db()
    assert row.rules == {"memory.add": "human", "user.add": "auto"} and row.threshold == 0.8
    assert AuditEvent.objects.filter(action="review.gates").count() == 1


@pytest.mark.parametrize("persona", ["carol", "bob"])
def test_a_viewer_or_reviewer_sees_the_rules_but_cannot_edit(request: Any, persona: str, client_as: Any) -> None:
    WorkspaceFactory(slug="acme")
    client = client_as(request.getfixturevalue(persona))
    page = client.get("/reviews/gates/acme/")
    assert page.status_code == 200 and 'name="user.add"' not in page.content.decode()
    assert client.post("/reviews/gates/acme/save", {"user.add": "auto"}).status_code == 403
    assert not WorkspaceGates.objects.exists() and not AuditEvent.objects.filter(action="review.gates").exists()


def test_a_bound_token_of_another_workspace_can_neither_see_nor_change_them(admin_user: Any) -> None:
    ws = WorkspaceFactory(slug="acme")
    WorkspaceFactory(slug="other")
    set_workspace_gates(ws, rules={"user.add": "human"}, threshold=None, user=admin_user)
    for scopes in ([TokenScope.FULL], [TokenScope.OPERATOR]):
        token = issue_token("other-agent", scopes, workspaces=["other"]).plaintext
        headers = {"Authorization": f"Bearer {token}"}
        seen = Client().get("/reviews/gates/acme/", headers=headers)
        assert seen.status_code == 302 and "/accounts/login/" in seen["Location"]
        changed = Client().post("/reviews/gates/acme/save", {"user.add": "auto"}, headers=headers)
        assert changed.status_code == 302 and "/accounts/login/" in changed["Location"]
    assert WorkspaceGates.objects.get(workspace=ws).rules == {"user.add": "human"}
    assert not AuditEvent.objects.filter(action="review.gates", actor_token__isnull=False).exists()
