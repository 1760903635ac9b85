"""hermes' outcome buckets (docs/compat/hermes.md#outcome-buckets), row by row, through the real pass and the real store."""

import pytest

from lessons.models import Lesson
from lessons.review import memory, review_and_learn
from lessons.review.gates import configured_gate, gate_name_for, human_gate, risk_gate, score_gate
from lessons.review.learning import ReviewPassError, Verdict
from lessons.review.proposals import parse_proposal
from lessons.review.targets import WorkspaceStore
from tests.factories import WorkspaceFactory

pytestmark = pytest.mark.django_db


def add(content, score=0.9, target="memory"):
    return {"target": target, "op": "add", "content": content, "rationale": "useful", "score": score}


class Proposer:
    def __init__(self, answer):
        self.answer = answer
        self.calls = []

    def __call__(self, summary):
        self.calls.append(summary)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def ws():
    return WorkspaceFactory(slug="acme")


@pytest.fixture
def store(ws):
    return WorkspaceStore(ws, agent="coder")


def test_it_returns_an_empty_outcome_for_a_blank_summary_without_calling_the_proposer(store):
    proposer = Proposer([add("x")])
    outcome = review_and_learn("  \n\t ", proposer=proposer, gate=score_gate(0.7), store=store)
    assert proposer.calls == []
    assert (outcome.applied, outcome.rejected, outcome.failed, outcome.pending) == ([], [], [], [])


def test_it_fails_the_pass_when_the_proposer_fails(store, ws):
    with pytest.raises(ReviewPassError, match="model down") as info:
        review_and_learn("did work", proposer=Proposer(RuntimeError("model down")), gate=score_gate(0.7), store=store)
    assert info.value.stage == "proposer"
    assert memory.entries_of(ws, "memory") == []


def test_it_returns_an_empty_outcome_for_zero_proposals(store):
    outcome = review_and_learn("did work", proposer=Proposer([]), gate=score_gate(0.7), store=store)
    assert outcome.as_dict() == {"applied": [], "rejected": [], "failed": [], "pending": []}


def test_an_invalid_proposal_fails_the_pass_and_earlier_writes_stay(store, ws):
    proposer = Proposer([add("first fact"), {"target": "memory", "op": "add", "content": "x", "score": 1.5}])
    with pytest.raises(ReviewPassError) as info:
        review_and_learn("did work", proposer=proposer, gate=score_gate(0.7), store=store)
    assert info.value.message.startswith("Invalid review proposal: ")
    assert "score" in info.value.message
    assert memory.entries_of(ws, "memory") == ["first fact"]


@pytest.mark.parametrize(
    "raw",
    [
        {"target": "notes", "op": "add", "content": "x", "score": 0.9},
        {"target": "memory", "op": "upsert", "content": "x", "score": 0.9},
        {"target": "memory", "op": "add", "score": 0.9},
        {"target": "memory", "op": "remove", "score": 0.9},
        {"target": "memory", "op": "add", "content": "x", "score": "0.9"},
        {"target": "lesson", "op": "add", "score": 0.9},
        "add a note",
    ],
)
def test_it_rejects_malformed_shapes(raw):
    with pytest.raises(Exception, match=r"^Invalid review proposal: "):
        parse_proposal(raw)


def test_it_accepts_hermes_camel_case_old_text():
    proposal = parse_proposal({"target": "user", "action": "remove", "oldText": "Ana", "score": 0.2})
    assert proposal.op == "remove" and proposal.old_text == "Ana"


def test_a_gate_error_fails_the_pass(store, ws):
    def broken_gate(proposal):
        raise TimeoutError("validator unreachable")

    with pytest.raises(ReviewPassError, match="validator unreachable") as info:
        review_and_learn("did work", proposer=Proposer([add("x")]), gate=broken_gate, store=store)
    assert info.value.stage == "gate"
    assert memory.entries_of(ws, "memory") == []


def test_the_gate_approves_at_exactly_the_threshold_and_rejects_just_below(store, ws):
    outcome = review_and_learn(
        "did work", proposer=Proposer([add("at", 0.7), add("below", 0.69)]), gate=score_gate(0.7), store=store
    )
    assert [i.proposal.content for i in outcome.applied] == ["at"]
    assert outcome.applied[0].outcome.message == "Entry added."
    assert [i.proposal.content for i in outcome.rejected] == ["below"]
    assert outcome.rejected[0].reason == "score 0.69 is below the threshold 0.70"
    assert outcome.failed == []
    assert memory.entries_of(ws, "memory") == ["at"]


def test_a_store_refusal_is_failed_and_a_gate_refusal_is_rejected(store, ws, settings):
    settings.MEMORY_CHAR_LIMIT = 30
    proposals = [add("a" * 20), add("b" * 20), add("c", 0.1), add("   ")]
    outcome = review_and_learn("did work", proposer=Proposer(proposals), gate=score_gate(0.7), store=store)
    assert [i.proposal.content for i in outcome.applied] == ["a" * 20]
    assert [i.reason for i in outcome.failed] == [
        "Memory at 20/30 chars. Adding this entry (20 chars) would exceed the limit. Consolidate now: use "
        "'replace' to merge overlapping entries into shorter ones or 'remove' stale or less important entries "
        "(see current_entries below), then retry this add — all in this turn.",
        "Content cannot be empty.",
    ]
    assert [i.proposal.content for i in outcome.rejected] == ["c"]
    assert "below the threshold" in outcome.rejected[0].reason
    assert memory.entries_of(ws, "memory") == ["a" * 20]


def test_an_approved_exact_duplicate_is_applied_without_writing(store, ws):
    memory.apply_op(ws, "memory", "add", content="uses pnpm")
    outcome = review_and_learn("did work", proposer=Proposer([add("uses pnpm")]), gate=score_gate(0.7), store=store)
    assert len(outcome.applied) == 1
    assert outcome.applied[0].reason == "Entry already exists (no duplicate added)."
    assert memory.entries_of(ws, "memory") == ["uses pnpm"]


def test_items_are_processed_in_order_one_gate_call_each(store):
    seen = []

    def gate(proposal):
        seen.append(proposal.content)
        return Verdict("approve", "ok")

    review_and_learn("w", proposer=Proposer([add("1"), add("2"), add("3")]), gate=gate, store=store)
    assert seen == ["1", "2", "3"]


def test_the_risk_tiered_policy_routes_each_op(store, ws):
    memory.apply_op(ws, "user", "add", content="Name: Ana")
    proposals = [
        add("high add", 0.8),
        add("low add", 0.5),
        {"target": "user", "op": "replace", "old_text": "Ana", "content": "Name: Ana B.", "score": 0.99},
        {"target": "user", "op": "remove", "old_text": "Ana", "score": 0.99},
        {"target": "lesson", "op": "add", "score": 0.99, "lesson": {"situation": "s", "correction": "c"}},
    ]
    outcome = review_and_learn("w", proposer=Proposer(proposals), gate=risk_gate(0.7), store=store)
    assert [i.proposal.content for i in outcome.applied] == ["high add"]
    assert [i.proposal.content for i in outcome.rejected] == ["low add"]
    assert [(i.proposal.target, i.proposal.op) for i in outcome.pending] == [
        ("user", "replace"),
        ("user", "remove"),
        ("lesson", "add"),
    ]
    assert outcome.pending[0].reason.startswith("replace waits for a person")
    assert outcome.pending[2].reason.startswith("lesson writes wait for a person")
    assert memory.entries_of(ws, "user") == ["Name: Ana"]
    assert Lesson.objects.count() == 0


def test_a_human_gate_holds_everything_as_pending(store, ws):
    outcome = review_and_learn("w", proposer=Proposer([add("x", 1.0)]), gate=human_gate(0.7), store=store)
    assert len(outcome.pending) == 1 and outcome.applied == []
    assert memory.entries_of(ws, "memory") == []


def test_gates_are_configured_per_target_and_op(settings):
    settings.REVIEW_GATES = ["memory.add=auto", "user=human", "lesson.add=auto"]
    settings.REVIEW_GATE = "risk"
    assert gate_name_for("memory", "add") == "auto"
    assert gate_name_for("memory", "remove") == "risk"
    assert gate_name_for("user", "add") == "human"
    gate = configured_gate()
    assert gate(parse_proposal(add("x", 0.9, "user"))).decision == "hold"
    assert gate(parse_proposal({"target": "memory", "op": "remove", "old_text": "x", "score": 0.9})).decision == "hold"
    lesson = parse_proposal(
        {"target": "lesson", "op": "add", "score": 0.9, "lesson": {"situation": "s", "correction": "c"}}
    )
    assert gate(lesson).decision == "approve"


def test_an_approved_lesson_goes_through_persist_lesson(store, ws):
    lesson = {
        "target": "lesson",
        "op": "add",
        "score": 0.8,
        "lesson": {"situation": "big edit", "correction": "patch mode"},
    }
    outcome = review_and_learn("w", proposer=Proposer([lesson]), gate=score_gate(0.7), store=store)
    assert outcome.applied[0].reason == "Lesson added."
    row = Lesson.objects.get()
    assert row.workspace == ws and row.provenance == "review" and row.versions.count() == 1
