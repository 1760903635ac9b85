"""The review pass, hermes' ``reviewAndLearn``: propose → gate → apply (docs/compat/hermes.md#review-pass).

A plain function over three injected collaborators; nothing here touches the database itself:

- ``proposer(summary)`` returns the raw proposals (a list, or a ``Proposed`` carrying the model's raw
  output too) and raises on failure;
- ``gate(proposal)`` returns a ``Verdict`` (approve / reject / hold for a person) and raises on failure;
- ``store.apply(proposal)`` returns a ``StoreOutcome``: ``ok`` or the store's refusal message.

The pass fails closed (``ReviewPassError``) when the proposer fails, a proposal has the wrong shape, or a
gate fails. Writes applied before such a failure stay applied: the store writes immediately. ``record``,
if given, sees every item as it is decided, so the caller can keep them even when the pass then fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from lessons.review.proposals import InvalidProposal, ReviewProposal, parse_proposal

Bucket = Literal["applied", "rejected", "failed", "pending"]


class ReviewPassError(Exception):
    """The pass failed as a whole; ``message`` says why (the proposer's or gate's error, or the shape)."""

    def __init__(self, message: str, *, stage: str) -> None:
        super().__init__(message)
        self.message = message
        self.stage = stage  # proposer / proposal / gate


@dataclass(frozen=True)
class Verdict:
    decision: Literal["approve", "reject", "hold"]
    reason: str
    gate: str = ""  # the policy that decided: auto / human / risk
    auto_approve: bool = False  # what the score gate alone would have said

    @property
    def approved(self) -> bool:
        return self.decision == "approve"


@dataclass(frozen=True)
class StoreOutcome:
    ok: bool
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    ref: Any = None  # the MemoryVersion or PersistResult behind it, for the caller's records


@dataclass(frozen=True)
class Proposed:
    """A proposer's answer: the raw proposals plus what the model said, for the record."""

    items: list[Any]
    raw_output: str = ""
    model: str = ""
    prompt_version: str = ""


@dataclass(frozen=True)
class Item:
    proposal: ReviewProposal
    bucket: Bucket
    reason: str = ""
    verdict: Verdict | None = None
    outcome: StoreOutcome | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"proposal": self.proposal.as_dict(), "reason": self.reason}
        if self.verdict is not None:
            data["gate"] = self.verdict.gate
        if self.outcome is not None:
            data["store"] = {"message": self.outcome.message, **self.outcome.details}
        return data


@dataclass
class LearnOutcome:
    applied: list[Item] = field(default_factory=list)
    rejected: list[Item] = field(default_factory=list)
    failed: list[Item] = field(default_factory=list)
    pending: list[Item] = field(default_factory=list)
    proposed: Proposed | None = None

    def bucket(self, name: Bucket) -> list[Item]:
        return {"applied": self.applied, "rejected": self.rejected, "failed": self.failed, "pending": self.pending}[
            name
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            name: [item.as_dict() for item in self.bucket(name)]
            for name in ("applied", "rejected", "failed", "pending")
        }  # type: ignore[arg-type]


class Store(Protocol):
    def apply(self, proposal: ReviewProposal) -> StoreOutcome: ...


Proposer = Callable[[str], "list[Any] | Proposed"]
Gate = Callable[[ReviewProposal], Verdict]


def review_and_learn(
    summary: str,
    *,
    proposer: Proposer,
    gate: Gate,
    store: Store,
    record: Callable[[int, Item], None] | None = None,
) -> LearnOutcome:
    outcome = LearnOutcome()
    if not summary or not summary.strip():
        return outcome
    try:
        answer = proposer(summary)
    except ReviewPassError:
        raise
    except Exception as exc:  # fail closed: whatever the proposer raised ends the pass
        raise ReviewPassError(str(getattr(exc, "message", None) or exc), stage="proposer") from exc
    proposed = answer if isinstance(answer, Proposed) else Proposed(items=list(answer))
    outcome.proposed = proposed
    for position, raw in enumerate(proposed.items):
        try:
            proposal = parse_proposal(raw)
        except InvalidProposal as exc:
            raise ReviewPassError(str(exc), stage="proposal") from exc
        try:
            verdict = gate(proposal)
        except Exception as exc:
            raise ReviewPassError(f"gate failed: {exc}", stage="gate") from exc
        if verdict.decision == "reject":
            item = Item(proposal, "rejected", verdict.reason, verdict)
        elif verdict.decision == "hold":
            item = Item(proposal, "pending", verdict.reason, verdict)
        else:
            result = store.apply(proposal)
            item = Item(proposal, "applied" if result.ok else "failed", result.message, verdict, result)
        outcome.bucket(item.bucket).append(item)
        if record is not None:
            record(position, item)
    return outcome
