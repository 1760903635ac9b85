"""Gates decide each proposal (docs/compat/hermes.md#gates): ``approve`` (apply now), ``reject`` (the
reason is kept), or ``hold`` (it waits in the approval queue as ``pending``).

- ``score_gate(threshold)``: hermes' ``scoreThresholdGate``, score ≥ threshold (inclusive) approves.
- ``human_gate``: everything waits for a person.
- ``risk_gate(threshold)``, the default: adds to ``memory`` at or above the threshold auto-apply (below:
  rejected); every write to the ``user`` file, every replace and remove, and lesson-target writes wait
  for a person.
- ``configured_gate()`` picks one per target and op from settings (``LESSONBOARD_REVIEW_GATES``).

Every verdict also carries what the score gate alone would have said (``auto_approve``), so the
decisions page can show how often people agree with it.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from lessons.review.learning import Verdict
from lessons.review.proposals import ReviewProposal

GateFn = Callable[[ReviewProposal], Verdict]


def score_verdict(score: float, threshold: float) -> tuple[bool, str]:
    if score >= threshold:
        return True, f"score {score:.2f} ≥ threshold {threshold:.2f}"
    return False, f"score {score:.2f} is below the threshold {threshold:.2f}"


def score_gate(threshold: float) -> GateFn:
    def gate(proposal: ReviewProposal) -> Verdict:
        ok, reason = score_verdict(proposal.score, threshold)
        return Verdict("approve" if ok else "reject", reason, gate="auto", auto_approve=ok)

    return gate


def human_gate(threshold: float) -> GateFn:
    def gate(proposal: ReviewProposal) -> Verdict:
        ok, reason = score_verdict(proposal.score, threshold)
        return Verdict("hold", f"waits for a person (gate: human; {reason})", gate="human", auto_approve=ok)

    return gate


def risk_gate(threshold: float) -> GateFn:
    def gate(proposal: ReviewProposal) -> Verdict:
        ok, reason = score_verdict(proposal.score, threshold)
        if proposal.target == "lesson":
            return Verdict("hold", f"lesson writes wait for a person ({reason})", gate="risk", auto_approve=ok)
        if proposal.op in ("replace", "remove"):
            return Verdict("hold", f"{proposal.op} waits for a person ({reason})", gate="risk", auto_approve=ok)
        if proposal.target == "user":
            return Verdict("hold", f"user-file writes wait for a person ({reason})", gate="risk", auto_approve=ok)
        return Verdict("approve" if ok else "reject", reason, gate="risk", auto_approve=ok)

    return gate


FACTORIES: dict[str, Callable[[float], GateFn]] = {"auto": score_gate, "human": human_gate, "risk": risk_gate}


def gate_name_for(target: str, op: str, *, rules: list[str] | None = None, default: str | None = None) -> str:
    """The configured gate for ``target.op``: the most specific rule wins, then the default."""
    table = dict(entry.split("=", 1) for entry in (settings.REVIEW_GATES if rules is None else rules))
    return table.get(f"{target}.{op}") or table.get(target) or default or settings.REVIEW_GATE


def configured_gate(
    *, rules: list[str] | None = None, default: str | None = None, threshold: float | None = None
) -> GateFn:
    limit = settings.REVIEW_THRESHOLD if threshold is None else threshold

    def gate(proposal: ReviewProposal) -> Verdict:
        name = gate_name_for(proposal.target, proposal.op, rules=rules, default=default)
        return FACTORIES[name](limit)(proposal)

    return gate
