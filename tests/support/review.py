"""Review fixtures every folder uses (a pytest plugin, registered in tests/conftest.py): ``stage`` runs one
real review pass whose proposals wait for a person (``hold``)."""

from __future__ import annotations

from typing import Any

import pytest

from lessons.review.learning import Verdict
from lessons.review.staging import run_review
from tests.factories import WorkspaceFactory


def hold(proposal: Any) -> Verdict:
    return Verdict("hold", "waits for a person (test)", gate="human", auto_approve=proposal.score >= 0.7)


@pytest.fixture
def stage(db: Any):
    """``stage(*raw_proposals, workspace="acme")`` → the pending Proposal rows of one real pass."""

    def make(*raw: dict[str, Any], workspace: str = "acme", summary: str = "did some work") -> list[Any]:
        ws = WorkspaceFactory(slug=workspace)
        result = run_review(ws, summary, agent="coder", proposer=lambda s: list(raw), gate=hold)
        assert result.error is None
        return list(result.run.proposals.order_by("position"))

    return make
