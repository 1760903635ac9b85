"""A reviewer's decisions on staged proposals: hold (reserve), approve (optionally after editing), reject
with a reason, undo within the grace period. Each one locks the proposal row (``select_for_update``), so two
reviewers racing for one item cannot both decide it, and each goes to the audit log.

Approving replays the write into the store, which checks everything again and may still refuse it: the
proposal then ends ``failed`` with the store's message (approval is not a bypass of the budget).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lessonboard.models import AgentToken, AuditEvent
from lessons.models import Lesson, LessonStatus, VersionAction
from lessons.review import memory
from lessons.review.metrics import DECISIONS
from lessons.review.models import Decision, MemoryDocument, MemoryVersion, Proposal, ProposalStatus
from lessons.review.proposals import InvalidProposal, ReviewProposal, parse_proposal
from lessons.review.targets import WorkspaceStore
from lessons.store import record_version as record_lesson_version

EDITABLE = ("content", "old_text")
LESSON_EDITABLE = ("situation", "mistake", "correction")


class DecisionError(Exception):
    def __init__(self, message: str, *, status: int = 409) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _claim(pk: int, user: Any, *, state: str = ProposalStatus.PENDING) -> Proposal:
    """The proposal row, locked; refused when someone else holds it or it is not in ``state``."""
    proposal = Proposal.objects.select_for_update(of=("self",)).select_related("workspace", "run").filter(pk=pk).first()
    if proposal is None:
        raise DecisionError(f"Proposal {pk} does not exist.", status=404)
    if state == ProposalStatus.PENDING and proposal.status != ProposalStatus.PENDING:
        raise DecisionError(f"Proposal {pk} was already decided ({proposal.status}).")
    if proposal.held_by_other(user):
        raise DecisionError(f"Proposal {pk} is being reviewed by {proposal.reserved_by}.")
    return proposal


@transaction.atomic
def reserve(pk: int, user: Any) -> Proposal:
    """Hold a pending proposal for ``REVIEW_HOLD`` seconds; others see it is taken."""
    proposal = _claim(pk, user)
    proposal.reserved_by = user
    proposal.reserved_until = timezone.now() + timedelta(seconds=settings.REVIEW_HOLD)
    proposal.save(update_fields=["reserved_by", "reserved_until"])
    return proposal


def as_proposal(row: Proposal, edits: dict[str, str] | None = None) -> ReviewProposal:
    data: dict[str, Any] = {"target": row.target, "op": row.op, "rationale": row.rationale, "score": row.score}
    if row.target == "lesson":
        data["lesson"] = dict(row.lesson)
    else:
        if row.op in ("add", "replace"):
            data["content"] = row.content
        if row.op in ("replace", "remove"):
            data["old_text"] = row.old_text
    for key, value in (edits or {}).items():
        if row.target == "lesson" and key in LESSON_EDITABLE:
            data["lesson"][key] = value
        elif row.target != "lesson" and key in EDITABLE and key in data:
            data[key] = value
    return parse_proposal(data)


def _finish(row: Proposal, user: Any, decision: str) -> None:
    row.decision = decision
    row.decided_by = user
    row.decided_at = timezone.now()
    row.reserved_by = None
    row.reserved_until = None


def _not_the_proposer(row: Proposal, token: AgentToken | None) -> None:
    """The integrity rule: the token that proposed a write can never decide it (docs/reviews.md#over-the-api)."""
    if token is not None and row.run.token_id == token.pk:
        raise DecisionError(f"Proposal {row.pk} was proposed with this token; it cannot decide it.", status=403)


@transaction.atomic
def approve(
    pk: int,
    user: Any,
    *,
    edits: dict[str, str] | None = None,
    token: AgentToken | None = None,
    reason: str = "",
) -> Proposal:
    """Approve (optionally after editing); ``token``: decided over the operator API, ``user`` being the
    person the token belongs to."""
    row = _claim(pk, user)
    _not_the_proposer(row, token)
    try:
        proposal = as_proposal(row, edits)
    except InvalidProposal as exc:
        raise DecisionError(str(exc), status=400) from exc
    edited = proposal != as_proposal(row)
    if edited:
        row.content = proposal.content or ""
        row.old_text = proposal.old_text or ""
        row.lesson = proposal.lesson.model_dump() if proposal.lesson else {}
    actor = f"user:{user.get_username()}" + (f" (token:{token.name})" if token is not None else "")
    store = WorkspaceStore(
        row.workspace, agent=row.agent, actor=actor, user=user, reason=reason or f"review proposal {pk}"
    )
    outcome = store.apply(proposal)
    row.status = ProposalStatus.APPLIED if outcome.ok else ProposalStatus.FAILED
    row.message = outcome.message
    if isinstance(outcome.ref, MemoryVersion):
        row.memory_version = outcome.ref
    elif outcome.ref is not None:
        row.lesson_ref, row.lesson_action = outcome.ref.lesson, outcome.ref.action
    _finish(row, user, Decision.EDITED if edited else Decision.APPROVED)
    row.save()
    DECISIONS.labels(row.target, row.decision, row.status).inc()
    AuditEvent.record(
        "review.edit_approve" if edited else "review.approve",
        user=user,
        token=token,
        object_type="proposal",
        object_ids=[pk],
        result={"status": row.status, "message": row.message, "target": row.target, "op": row.op},
        reason=reason,
    )
    return row


# Removes, then replaces, then adds: a consolidation (add the merged entry, remove the ones it replaces)
# fits the budget when the old entries go first.
BATCH_ORDER = {"remove": 0, "replace": 1, "add": 2}


@transaction.atomic
def approve_together(pks: list[int], user: Any) -> list[Proposal]:
    """Approve memory proposals of one workspace and target as one all-or-nothing batch (hermes'
    ``{action: 'batch', operations}``): every write is replayed into the store in one transaction, removes
    first; if the store refuses any of them, nothing is applied and nothing is decided (``DecisionError``
    naming the proposal and the store's reason). For an ``add`` together with the ``remove`` that
    consolidates it."""
    if len(set(pks)) < 2:
        raise DecisionError("Select at least two proposals to approve together.", status=400)
    rows = [_claim(pk, user) for pk in sorted(set(pks))]  # locked, in id order (no deadlock between two batches)
    kinds = {(row.workspace_id, row.target) for row in rows}
    if len(kinds) != 1 or rows[0].target == "lesson":
        raise DecisionError(
            "Proposals approved together must change the same memory target of the same workspace.", status=400
        )
    store = WorkspaceStore(
        rows[0].workspace,
        agent=rows[0].agent,
        actor=f"user:{user.get_username()}",
        user=user,
        reason="review batch " + ", ".join(str(row.pk) for row in rows),
    )
    ordered = sorted(rows, key=lambda row: (BATCH_ORDER.get(row.op, 3), row.pk))
    outcomes = []
    # One transaction (this function's): raising below rolls back every write before it, and the claims.
    for row in ordered:
        outcome = store.apply(as_proposal(row))
        if not outcome.ok:
            raise DecisionError(
                f"Nothing was applied: proposal {row.pk} ({row.op}) was refused by the store — {outcome.message}"
            )
        outcomes.append((row, outcome))
    for row, outcome in outcomes:
        row.status = ProposalStatus.APPLIED
        row.message = outcome.message
        if isinstance(outcome.ref, MemoryVersion):
            row.memory_version = outcome.ref
        _finish(row, user, Decision.APPROVED)
        row.save()
        DECISIONS.labels(row.target, row.decision, row.status).inc()
    AuditEvent.record(
        "review.approve_batch",
        user=user,
        object_type="proposal",
        object_ids=[row.pk for row in ordered],
        result={"status": "applied", "order": [f"{row.pk}:{row.op}" for row in ordered]},
    )
    return ordered


@transaction.atomic
def reject(pk: int, user: Any, *, reason: str, token: AgentToken | None = None) -> Proposal:
    reason = (reason or "").strip()
    if not reason:
        raise DecisionError("A rejection needs a reason.", status=400)
    row = _claim(pk, user)
    _not_the_proposer(row, token)
    row.status = ProposalStatus.REJECTED
    row.reason = reason
    _finish(row, user, Decision.REJECTED)
    row.save()
    DECISIONS.labels(row.target, row.decision, row.status).inc()
    AuditEvent.record(
        "review.reject",
        user=user,
        token=token,
        object_type="proposal",
        object_ids=[pk],
        result={"status": row.status, "target": row.target, "op": row.op},
        reason=reason,
    )
    return row


def _revert_memory(row: Proposal, user: Any) -> None:
    version = row.memory_version
    if version is None:
        return  # a no-op write (exact duplicate): nothing was written
    doc = MemoryDocument.objects.select_for_update().get(pk=version.document_id)
    if doc.version != version.number:
        raise DecisionError("The memory changed since this write; undo refused. Propose the correction instead.")
    previous = MemoryVersion.objects.filter(document=doc, number=version.number - 1).first()
    memory.record_version(
        doc,
        "undo",
        list(previous.entries) if previous else [],
        message=f"undo of proposal {row.pk}",
        actor=f"user:{user.get_username()}",
        user=user,
        reason=f"undo of review proposal {row.pk}",
    )


def _revert_lesson(row: Proposal, user: Any) -> None:
    lesson = Lesson.objects.select_for_update().filter(pk=row.lesson_ref_id).first() if row.lesson_ref_id else None
    if lesson is None:
        return
    if row.lesson_action != "created" or lesson.versions.count() != 1:
        raise DecisionError("The lesson changed since (or was an existing one reinforced); undo refused.")
    lesson.status = LessonStatus.ARCHIVED
    lesson.updated_at = timezone.now()
    lesson.save(update_fields=["status", "updated_at"])
    record_lesson_version(
        lesson,
        VersionAction.ARCHIVE,
        actor=f"user:{user.get_username()}",
        user=user,
        reason=f"undo of review proposal {row.pk}",
    )


def may_undo(row: Proposal, user: Any) -> bool:
    """Undo belongs to the decider (a second look at one's own call) or an admin, never a peer."""
    return bool(user.is_superuser) or (row.decided_by_id is not None and row.decided_by_id == user.pk)


@transaction.atomic
def undo(pk: int, user: Any) -> Proposal:
    """Put a decided proposal back in the queue, reverting its write, within ``REVIEW_UNDO_GRACE``."""
    row = _claim(pk, user, state="any")
    if not row.can_undo():
        raise DecisionError(f"Proposal {pk} can no longer be undone.")
    if not may_undo(row, user):
        raise DecisionError(
            f"Only {row.decided_by or 'the reviewer who decided it'} or an admin may undo proposal {pk}.", status=403
        )
    if row.status == ProposalStatus.APPLIED:
        if row.target == "lesson":
            _revert_lesson(row, user)
        else:
            _revert_memory(row, user)
    previous = {"status": row.status, "decision": row.decision}
    original = row.original or {}
    row.content = original.get("content", row.content)
    row.old_text = original.get("old_text", row.old_text)
    if "lesson" in original:
        row.lesson = original["lesson"]
    row.status = ProposalStatus.PENDING
    row.decision = Decision.NONE
    row.decided_by = None
    row.decided_at = None
    row.reason = ""
    row.message = ""
    row.memory_version = None
    row.lesson_ref = None
    row.lesson_action = ""
    row.reserved_by = user
    row.reserved_until = timezone.now() + timedelta(seconds=settings.REVIEW_HOLD)
    row.save()
    AuditEvent.record("review.undo", user=user, object_type="proposal", object_ids=[pk], result=previous)
    return row


@transaction.atomic
def release(pk: int, user: Any, *, held_until: str = "") -> bool:
    """Give back this user's hold on a pending proposal (the page was left). ``held_until`` is the hold
    the page was rendered with: a release arriving after the same user re-opened the proposal (a reload
    makes a new hold) leaves the newer hold alone. True when a hold was released."""
    proposal = Proposal.objects.select_for_update().filter(pk=pk, status=ProposalStatus.PENDING).first()
    if proposal is None or proposal.reserved_by_id != getattr(user, "pk", None) or proposal.reserved_until is None:
        return False
    if held_until and proposal.reserved_until.isoformat() != held_until:
        return False
    proposal.reserved_by = None
    proposal.reserved_until = None
    proposal.save(update_fields=["reserved_by", "reserved_until"])
    return True
