"""Approving an add together with the remove that consolidates it: one all-or-nothing batch."""

from __future__ import annotations

from typing import Any

import pytest

from lessonboard.models import AuditEvent
from lessons.review import decisions, memory
from lessons.review.models import ProposalStatus

pytestmark = pytest.mark.django_db

OLD_A = "Deploys use helm."
OLD_B = "Helm deploys need --atomic."
MERGED = "Deploys use helm upgrade --atomic."


def seed(stage: Any, bob: Any) -> None:
    for row in stage(
        {"target": "memory", "op": "add", "content": OLD_A, "score": 0.9},
        {"target": "memory", "op": "add", "content": OLD_B, "score": 0.9},
    ):
        decisions.approve(row.pk, bob)


def test_a_consolidation_applies_all_at_once_removes_first(stage: Any, bob: Any, settings: Any) -> None:
    seed(stage, bob)
    settings.MEMORY_CHAR_LIMIT = len(OLD_A) + len(OLD_B) + len(memory.ENTRY_DELIMITER)  # full: the add alone won't fit
    add, remove_a, remove_b = stage(
        {"target": "memory", "op": "add", "content": MERGED, "score": 0.9},
        {"target": "memory", "op": "remove", "old_text": OLD_A, "score": 0.9},
        {"target": "memory", "op": "remove", "old_text": OLD_B, "score": 0.9},
    )
    alone = decisions.approve(add.pk, bob)
    assert alone.status == ProposalStatus.FAILED  # one at a time the add is over budget...
    add2, remove_a, remove_b = stage(
        {"target": "memory", "op": "add", "content": MERGED, "score": 0.9},
        {"target": "memory", "op": "remove", "old_text": OLD_A, "score": 0.9},
        {"target": "memory", "op": "remove", "old_text": OLD_B, "score": 0.9},
    )
    rows = decisions.approve_together([add2.pk, remove_a.pk, remove_b.pk], bob)  # ...together it fits
    assert [row.op for row in rows] == ["remove", "remove", "add"]
    assert all(row.status == ProposalStatus.APPLIED for row in rows)
    assert memory.entries_of(add2.workspace, "memory") == [MERGED]
    assert AuditEvent.objects.filter(action="review.approve_batch").count() == 1


def test_if_the_store_refuses_one_nothing_is_applied_or_decided(stage: Any, bob: Any) -> None:
    seed(stage, bob)
    add, remove_missing = stage(
        {"target": "memory", "op": "add", "content": MERGED, "score": 0.9},
        {"target": "memory", "op": "remove", "old_text": "no such entry", "score": 0.9},
    )
    with pytest.raises(decisions.DecisionError, match=r"Nothing was applied: proposal .* \(remove\)"):
        decisions.approve_together([add.pk, remove_missing.pk], bob)
    assert memory.entries_of(add.workspace, "memory") == [OLD_A, OLD_B]
    add.refresh_from_db()
    remove_missing.refresh_from_db()
    assert add.status == remove_missing.status == ProposalStatus.PENDING


def test_only_one_memory_target_of_one_workspace_goes_together(stage: Any, bob: Any, client_as: Any) -> None:
    memory_add, user_add = stage(
        {"target": "memory", "op": "add", "content": "a fact", "score": 0.9},
        {"target": "user", "op": "add", "content": "a preference", "score": 0.9},
    )
    with pytest.raises(decisions.DecisionError, match="same memory target"):
        decisions.approve_together([memory_add.pk, user_add.pk], bob)
    response = client_as(bob).post(
        "/reviews/bulk", {"ids": [memory_add.pk, user_add.pk], "action": "approve_together"}, follow=True
    )
    assert "same memory target" in response.content.decode()
    memory_add.refresh_from_db()
    assert memory_add.status == ProposalStatus.PENDING
