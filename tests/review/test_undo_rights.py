"""Undo of a review decision belongs to the reviewer who decided, or an admin (docs/security.md#reviews)."""

from __future__ import annotations

from typing import Any

import pytest

from lessonboard.models import AuditEvent
from lessons.review import memory
from lessons.review.models import Proposal
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def add(content: str) -> dict[str, Any]:
    return {"target": "memory", "op": "add", "content": content, "rationale": "because", "score": 0.9}


def test_another_reviewer_cannot_undo_a_decision_and_the_attempt_is_audited(
    bob: Any, client_as: Any, stage: Any
) -> None:
    (row,) = stage(add("uses pnpm"))
    client_as(bob).post(f"/reviews/{row.pk}/approve")
    dora = UserFactory(username="dora", role="reviewer")

    response = client_as(dora).post(f"/reviews/{row.pk}/undo", follow=True)
    assert "Only bob or an admin may undo" in response.content.decode()
    row.refresh_from_db()
    assert (row.status, row.decided_by) == ("applied", bob)
    assert memory.entries_of(row.workspace, "memory") == ["uses pnpm"]
    assert not AuditEvent.objects.filter(action="review.undo").exists()
    refused = AuditEvent.objects.get(action="review.undo_refused")
    assert (refused.actor_user, refused.object_ids) == (dora, [str(row.pk)])


def test_the_decider_and_an_admin_may_undo(bob: Any, admin_user: Any, client_as: Any, stage: Any) -> None:
    # Two workspaces: undoing one memory write refuses when a later write changed the same memory.
    (first,) = stage(add("one"), workspace="acme")
    (second,) = stage(add("two"), workspace="globex")
    client_as(bob).post(f"/reviews/{first.pk}/approve")
    client_as(bob).post(f"/reviews/{second.pk}/approve")

    client_as(bob).post(f"/reviews/{first.pk}/undo")
    client_as(admin_user).post(f"/reviews/{second.pk}/undo")
    assert list(Proposal.objects.values_list("status", flat=True).order_by("pk")) == ["pending", "pending"]
    undos = AuditEvent.objects.filter(action="review.undo").order_by("id")
    assert [e.actor_user for e in undos] == [bob, admin_user]
    assert memory.entries_of(first.workspace, "memory") == []
