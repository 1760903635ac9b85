"""The proposal page's hints — duplicate, near duplicate, possible contradiction — measured on the labelled
pairs in tests/data/review_hint_pairs.jsonl (bench/bench_review_hints.py prints the table). The floors
below are the figures measured when the set was written: a change to the heuristic that lowers them fails
here, and one that raises them should raise the floors."""

from __future__ import annotations

from pathlib import Path

import pytest

from lessonboard.models import Workspace
from lessons.review.hint_eval import evaluate, predict
from lessons.review.nearest import nearest
from lessons.review.staging import stage_lesson

PAIRS = Path(__file__).resolve().parents[1] / "data" / "review_hint_pairs.jsonl"

# label → (recall floor, precision floor), as measured: 37 pairs.
FLOORS = {
    "duplicate": (1.0, 1.0),
    "near duplicate": (0.875, 0.875),
    "contradiction": (0.9, 1.0),
    "related": (0.62, 0.71),  # 5 of 8 found, 5 of 7 right
    "unrelated": (1.0, 0.8),
}


@pytest.mark.parametrize("label", sorted(FLOORS))
def test_hints_hold_their_measured_precision_and_recall(label: str) -> None:
    report = evaluate(PAIRS)
    recall, precision = FLOORS[label]
    assert report.recall(label) >= recall
    assert report.precision(label) >= precision


def test_it_flags_opposite_advice_on_the_same_thing_but_not_a_rewording() -> None:
    assert predict("Run migrations during deploys.", "Do not run migrations during deploys.") == "contradiction"
    assert predict("Pin versions in requirements.txt.", "Pin versions in requirements.txt.") == "duplicate"
    assert predict("Never push to main directly.", "Never push directly to main.") == "near duplicate"
    assert predict("Never push to main directly.", "The user's timezone is Europe/Lisbon.") == "unrelated"


@pytest.mark.django_db
def test_the_proposal_page_shows_the_contradiction_hint(client_as, bob) -> None:
    from lessons.store import persist_lesson

    ws = Workspace.objects.for_slug("hints")
    persist_lesson(
        situation="deploying the api",
        mistake="",
        correction="run database migrations during deploys",
        tags=[],
        trigger="manual",
        workspace=ws,
    )
    proposal = stage_lesson(
        ws,
        situation="deploying the api",
        mistake="migrations locked the orders table during a deploy",
        correction="do not run database migrations during deploys",
        tags=[],
        trigger="error",
        origin="test",
        summary="hint test",
        user=bob,
    )
    flags = {n.flag for n in nearest(ws, "deploying the api do not run database migrations during deploys")}
    assert "possible contradiction" in flags
    html = client_as(bob).get(f"/reviews/{proposal.pk}/").content.decode()
    assert "possible contradiction" in html
