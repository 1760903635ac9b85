"""Gates decide each proposal (docs/compat/hermes.md#gates): ``approve`` (apply now), ``reject`` (the
reason is kept), or ``hold`` (it waits in the approval queue as ``pending``).

- ``score_gate(threshold)``: hermes' ``scoreThresholdGate``, score ≥ threshold (inclusive) approves.
- ``human_gate``: everything waits for a person.
- ``risk_gate(threshold)``, the default: adds to ``memory`` at or above the threshold auto-apply (below:
  rejected); every write to the ``user`` file, every replace and remove, and lesson-target writes wait
  for a person.
- ``configured_gate(workspace=…)`` picks one per target and op: the workspace's own rule for that write
  (``WorkspaceGates``, set on its gate page), else the server's (``LESSONBOARD_REVIEW_GATES``, then
  ``LESSONBOARD_REVIEW_GATE``). A workspace rule is ``auto`` or ``human``; its threshold, when set,
  replaces ``LESSONBOARD_REVIEW_THRESHOLD`` for that workspace.

Every verdict also carries what the score gate alone would have said (``auto_approve``), so the
decisions page can show how often people agree with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings

from lessonboard.models import Workspace
from lessons.review.learning import Verdict
from lessons.review.models import GATE_KEYS, GateRule, WorkspaceGates
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


@dataclass(frozen=True)
class Effective:
    """What decides one write in one workspace: the gate, the threshold and where the rule comes from."""

    gate: str
    threshold: float
    source: str  # "workspace" or "server"


def workspace_rules(workspace: Workspace | None) -> tuple[dict[str, str], float | None]:
    if workspace is None or workspace.pk is None:
        return {}, None
    row = WorkspaceGates.objects.filter(workspace=workspace).first()
    if row is None:
        return {}, None
    return {
        k: v for k, v in row.rules.items() if k in GATE_KEYS and v in (GateRule.AUTO, GateRule.HUMAN)
    }, row.threshold


def effective(target: str, op: str, own: dict[str, str], own_threshold: float | None) -> Effective:
    threshold = settings.REVIEW_THRESHOLD if own_threshold is None else own_threshold
    key = f"{target}.{op}"
    if key in own:
        return Effective(own[key], threshold, "workspace")
    return Effective(gate_name_for(target, op), threshold, "server")


def configured_gate(
    *,
    rules: list[str] | None = None,
    default: str | None = None,
    threshold: float | None = None,
    workspace: Workspace | None = None,
) -> GateFn:
    own, own_threshold = workspace_rules(workspace)
    limit = (settings.REVIEW_THRESHOLD if own_threshold is None else own_threshold) if threshold is None else threshold

    def gate(proposal: ReviewProposal) -> Verdict:
        key = f"{proposal.target}.{proposal.op}"
        if key in own:
            verdict = FACTORIES[own[key]](limit)(proposal)
            return replace(verdict, reason=f"{verdict.reason} (workspace rule {key}={own[key]})")
        name = gate_name_for(proposal.target, proposal.op, rules=rules, default=default)
        return FACTORIES[name](limit)(proposal)

    return gate


class GateRulesError(ValueError):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def set_workspace_gates(
    workspace: Workspace, *, rules: dict[str, str], threshold: float | None, user: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Store a workspace's gate rules (``""`` for a key: the server's rule) and audit the change
    (``review.gates``, with the rules before and after). Returns ``(before, after)``."""
    from django.utils import timezone

    from lessonboard.models import AuditEvent

    for key, value in rules.items():
        if key not in GATE_KEYS:
            raise GateRulesError(f"no gate rule {key!r} (one of {', '.join(GATE_KEYS)})", key)
        if value not in GateRule.values:
            raise GateRulesError(f"{key}: {value!r} is not one of auto, human or '' (server default)", key)
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise GateRulesError("the threshold must be from 0 to 1", "threshold")
    row, _ = WorkspaceGates.objects.select_for_update().get_or_create(workspace=workspace)
    before = {"rules": dict(row.rules), "threshold": row.threshold}
    row.rules = {key: value for key, value in sorted(rules.items()) if value}
    row.threshold = threshold
    row.updated_at = timezone.now()
    row.updated_by = user
    row.save()
    after = {"rules": dict(row.rules), "threshold": row.threshold}
    AuditEvent.record(
        "review.gates",
        user=user,
        object_type="workspace",
        object_ids=[workspace.pk],
        result={"workspace": workspace.slug, "before": before, "after": after},
    )
    return before, after
