"""The approval queue (pending proposals, oldest first), one proposal's page, decisions, and history;
a workspace's gate rules.

Reading is not an action: every role sees the queue, a proposal, the decisions and the gate rules. Every
decision checks ``lessonboard.review_memory`` itself: a viewer or operator posting a decision gets 403;
changing gate rules checks ``lessonboard.manage_tokens`` (admin).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from lessonboard.diff import SideBySide, side_by_side
from lessonboard.models import AuditEvent, Workspace
from lessonboard.permissions import require_perm, view_required
from lessons.content import fact_content
from lessons.reflect.models import DocProposal
from lessons.review import decisions, memory
from lessons.review.gates import GateRulesError, effective, set_workspace_gates, workspace_rules
from lessons.review.models import GATE_KEYS, Decision, GateRule, Proposal, ProposalStatus, WorkspaceGates
from lessons.review.nearest import Neighbour, nearest
from lessons.review.wording import TARGET_LABELS, decided_text, for_people

review_required = require_perm("lessonboard.review_memory")


@dataclass
class Preview:
    """What approving would do, computed against the live entries (the store checks again on approval)."""

    target_label: str
    before_usage: str = ""
    after_usage: str = ""
    ok: bool = True
    store_message: str = ""
    resolved_entry: str = ""
    warnings: list[str] = field(default_factory=list)
    over_budget: bool = False
    already_known: bool = False
    text: str = ""
    neighbours: list[Neighbour] = field(default_factory=list)
    word_diff: SideBySide | None = None  # a replace: the entry before and after, word by word


def preview(row: Proposal) -> Preview:
    result = Preview(TARGET_LABELS.get(row.target, row.target))
    if row.target == "lesson":
        lesson = row.lesson or {}
        result.text = fact_content(
            lesson.get("situation", ""),
            lesson.get("mistake", ""),
            lesson.get("correction", ""),
            lesson.get("trigger", ""),
        )
        result.neighbours = nearest(row.workspace, result.text)
        return result
    entries = memory.entries_of(row.workspace, row.target)
    limit = memory.limit_for(row.target)
    plan = memory.plan(entries, row.op, content=row.content, old_text=row.old_text, limit=limit)
    result.before_usage = memory.usage_text(entries, limit)
    result.after_usage = memory.usage_text(plan.after, limit) if plan.ok else result.before_usage
    result.ok, result.store_message = plan.ok, plan.message
    if plan.index is not None and row.op in ("replace", "remove"):
        result.resolved_entry = plan.before[plan.index]
        if row.op == "replace":
            result.word_diff = side_by_side(result.resolved_entry, row.content)
    if plan.message.startswith(("Memory at", "Replacement would put")):
        result.over_budget = True
        result.warnings.append("Over budget: approving would end as failed. Remove or shorten entries first.")
    elif plan.message.startswith("No entry matched"):
        result.warnings.append(f"No entry matches '{row.old_text.strip()}': the store would refuse it.")
    elif plan.message.startswith("Multiple entries matched"):
        result.warnings.append(f"Ambiguous: {len(plan.matches)} different entries match '{row.old_text.strip()}'.")
    elif not plan.ok:
        result.warnings.append(for_people(plan.message))
    result.already_known = plan.ok and not plan.changed and row.op == "add"
    result.text = row.content or result.resolved_entry or row.old_text
    result.neighbours = nearest(row.workspace, result.text)
    return result


def _pending_filtered(request: HttpRequest) -> Any:
    rows = Proposal.objects.pending().for_list().select_related("workspace", "reserved_by")
    if request.GET.get("target"):
        rows = rows.filter(target=request.GET["target"])
    if request.GET.get("workspace"):
        rows = rows.filter(workspace__slug=request.GET["workspace"])
    return rows


def _undo_context(request: HttpRequest) -> dict[str, Any]:
    """The reviewer's last decision, while it can still be undone."""
    pk = request.session.get("review_undo")
    row = Proposal.objects.filter(pk=pk, decided_by_id=request.user.pk).first() if pk else None
    return {
        "undo_row": row if row is not None and row.can_undo() else None,
        "undo_seconds": int(settings.REVIEW_UNDO_GRACE),
    }


def can_review(request: HttpRequest) -> bool:
    return bool(request.user.has_perm("lessonboard.review_memory"))


@require_GET
@view_required
def queue_page(request: HttpRequest) -> HttpResponse:
    page = Paginator(_pending_filtered(request), 50).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "threshold": settings.REVIEW_THRESHOLD,
        "labels": TARGET_LABELS,
        "pending_count": Proposal.objects.pending().count(),
        # Doc rewrites held by a workspace's human gate (doc reflection) wait here too; they are decided
        # on their workspace page, which shows the per-file diffs and re-checks the snapshot on approval.
        "doc_proposals": DocProposal.objects.pending().select_related("workspace").order_by("created_at", "id")[:50],
        "filters": {"target": request.GET.get("target", ""), "workspace": request.GET.get("workspace", "")},
        "now": timezone.now(),
        "can_review": can_review(request),
        "oob_count": bool(request.htmx),  # type: ignore[attr-defined]
        **_undo_context(request),
    }
    template = "reviews/queue.html#queue-list" if request.htmx else "reviews/queue.html"  # type: ignore[attr-defined]
    return render(request, template, context)


def _neighbours_in_queue(row: Proposal) -> tuple[int | None, int | None]:
    pending = Proposal.objects.pending()
    before = pending.filter(Q(created_at__lt=row.created_at) | Q(created_at=row.created_at, id__lt=row.pk))
    after = pending.filter(Q(created_at__gt=row.created_at) | Q(created_at=row.created_at, id__gt=row.pk))
    prev_row = before.order_by("-created_at", "-id").values_list("pk", flat=True).first()
    next_row = after.values_list("pk", flat=True).first()
    return prev_row, next_row


@require_GET
@view_required
def proposal_page(request: HttpRequest, pk: int) -> HttpResponse:
    """Opening a pending proposal holds it for a reviewer for ``REVIEW_HOLD`` seconds; others only look."""
    row = get_object_or_404(Proposal.objects.select_related("workspace", "run", "decided_by", "reserved_by"), pk=pk)
    taken = False
    if row.status == ProposalStatus.PENDING and can_review(request):
        try:
            row = decisions.reserve(pk, request.user)
        except decisions.DecisionError:
            taken = True
            row.refresh_from_db()
    prev_pk, next_pk = _neighbours_in_queue(row)
    context = {
        "row": row,
        "preview": preview(row),
        "taken": taken,
        "threshold": settings.REVIEW_THRESHOLD,
        "above_threshold": row.score >= settings.REVIEW_THRESHOLD,
        "prev_pk": prev_pk,
        "next_pk": next_pk,
        "can_review": can_review(request),
        "store_message": for_people(row.message),
        "held_until": row.reserved_until.isoformat() if row.reserved_until and not taken else "",
        **_undo_context(request),
    }
    return render(request, "reviews/proposal.html", context)


def _after_decision(request: HttpRequest, row: Proposal) -> HttpResponse:
    next_pk = Proposal.objects.pending().exclude(pk=row.pk).values_list("pk", flat=True).first()
    if next_pk is not None and request.POST.get("stay") != "1":
        return redirect("reviews:proposal", pk=next_pk)
    return redirect("reviews:queue")


def _decided_message(request: HttpRequest, row: Proposal) -> None:
    if row.status == ProposalStatus.FAILED:
        messages.error(request, decided_text(row))
    else:
        messages.success(request, decided_text(row))
    request.session["review_undo"] = row.pk


@require_POST
@review_required
def approve(request: HttpRequest, pk: int) -> HttpResponse:
    edits = {
        key: request.POST[key]
        for key in ("content", "old_text", "situation", "mistake", "correction")
        if key in request.POST
    }
    try:
        row = decisions.approve(pk, request.user, edits=edits or None)
    except decisions.DecisionError as exc:
        messages.error(request, exc.message)
        return redirect("reviews:proposal", pk=pk) if exc.status != 404 else redirect("reviews:queue")
    _decided_message(request, row)
    return _after_decision(request, row)


@require_POST
@review_required
def reject(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        row = decisions.reject(pk, request.user, reason=request.POST.get("reason", ""))
    except decisions.DecisionError as exc:
        messages.error(request, exc.message)
        return redirect("reviews:proposal", pk=pk) if exc.status != 404 else redirect("reviews:queue")
    _decided_message(request, row)
    return _after_decision(request, row)


@require_POST
@review_required
def release(request: HttpRequest, pk: int) -> HttpResponse:
    """The proposal page was left (its script sends this on ``pagehide``): give the hold back so paging
    through the queue does not hold every proposal passed."""
    released = decisions.release(pk, request.user, held_until=request.POST.get("held_until", ""))
    return HttpResponse(status=204 if released else 200)


@require_POST
@review_required
def undo(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        decisions.undo(pk, request.user)
    except decisions.DecisionError as exc:
        if exc.status == 403:  # recorded outside the refused transaction, so it stays
            AuditEvent.record(
                "review.undo_refused", user=request.user, object_type="proposal", object_ids=[pk], reason=exc.message
            )
        messages.error(request, exc.message)
        return redirect("reviews:decisions")
    messages.success(request, f"#{pk} is back in the queue.")
    return redirect("reviews:proposal", pk=pk)


@require_POST
@review_required
def bulk_decide(request: HttpRequest) -> HttpResponse:
    # "²".isdigit() too; past 18 digits no row has the id (and past 4,300 int() refuses it)
    ids = [int(v) for v in request.POST.getlist("ids") if v.isascii() and v.isdigit() and len(v) < 19]
    action = request.POST.get("action")
    if not ids or action not in ("approve", "reject", "approve_together"):
        messages.error(request, "Select proposals and an action.")
        return redirect("reviews:queue")
    if action == "approve_together":
        try:
            rows = decisions.approve_together(ids, request.user)
        except decisions.DecisionError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Applied together: {', '.join(f'#{row.pk} {row.op}' for row in rows)}.")
        return redirect(reverse("reviews:queue"))
    done: dict[str, int] = {}
    errors: list[str] = []
    for pk in ids:
        try:
            if action == "approve":
                row = decisions.approve(pk, request.user)
            else:
                row = decisions.reject(pk, request.user, reason=request.POST.get("reason", ""))
            done[row.status] = done.get(row.status, 0) + 1
        except decisions.DecisionError as exc:
            errors.append(exc.message)
    summary = ", ".join(f"{n} {status}" for status, n in done.items()) or "nothing decided"
    messages.success(request, f"Bulk {action}: {summary}.")
    for message in errors[:10]:
        messages.error(request, message)
    return redirect(reverse("reviews:queue"))


def agreement_by_target() -> list[dict[str, Any]]:
    """Per target: of the proposals people decided, how often they agreed with the score gate."""
    approved = Q(decision__in=[Decision.APPROVED, Decision.EDITED])
    agree = (approved & Q(auto_approve=True)) | (Q(decision=Decision.REJECTED) & Q(auto_approve=False))
    rows = (
        Proposal.objects.decided_by_people()
        .values("target")
        .annotate(total=Count("id"), agreed=Count("id", filter=agree), approved=Count("id", filter=approved))
        .order_by("target")
    )
    return [
        {**r, "label": TARGET_LABELS.get(r["target"], r["target"]), "rate": round(100 * r["agreed"] / r["total"])}
        for r in rows
    ]


def rejections_by_source() -> list[dict[str, Any]]:
    """Per target and agent: how many proposals were rejected (by the gate or a person) and how many in all,
    so a noisy proposer shows up."""
    rejected = Q(status=ProposalStatus.REJECTED)
    return [
        dict(row)
        for row in Proposal.objects.values("target", "agent")
        .annotate(
            total=Count("id"),
            rejected=Count("id", filter=rejected),
            by_people=Count("id", filter=rejected & Q(decision=Decision.REJECTED)),
        )
        .order_by("-rejected", "target", "agent")[:20]
    ]


@require_GET
@view_required
def decisions_page(request: HttpRequest) -> HttpResponse:
    rows = (
        Proposal.objects.exclude(decision="")
        .for_list()
        .select_related("workspace", "decided_by")
        .order_by("-decided_at", "-id")
    )
    filters = {k: request.GET.get(k, "") for k in ("target", "decision", "status", "workspace", "reviewer")}
    if filters["target"]:
        rows = rows.filter(target=filters["target"])
    if filters["decision"]:
        rows = rows.filter(decision=filters["decision"])
    if filters["status"]:
        rows = rows.filter(status=filters["status"])
    if filters["workspace"]:
        rows = rows.filter(workspace__slug=filters["workspace"])
    if filters["reviewer"]:
        rows = rows.filter(decided_by__username=filters["reviewer"])
    context = {
        "page": Paginator(rows, 50).get_page(request.GET.get("page")),
        "agreement": agreement_by_target(),
        "rejections": rejections_by_source(),
        "filters": filters,
        "labels": TARGET_LABELS,
        "decisions": Decision.choices[1:],
        "statuses": ProposalStatus.choices,
        "threshold": settings.REVIEW_THRESHOLD,
    }
    template = "reviews/decisions.html#history" if request.htmx else "reviews/decisions.html"  # type: ignore[attr-defined]
    return render(request, template, context)


# --- a workspace's gate rules (docs/reviews.md#workspace-rules) ----------------------------------------------
# Every role reads what applies to each write; changing a rule needs the admin role
# (``lessonboard.manage_tokens``: loosening a gate is a security setting), goes through a CSRF-checked form
# and is audited with the rules before and after.


@require_GET
@view_required
def gates_page(request: HttpRequest, slug: str) -> HttpResponse:
    workspace = get_object_or_404(Workspace, slug=slug)
    own, own_threshold = workspace_rules(workspace)
    rows = []
    for key in GATE_KEYS:
        target, op = key.split(".")
        now = effective(target, op, own, own_threshold)
        rows.append(
            {
                "key": key,
                "target": TARGET_LABELS.get(target, target),
                "op": op,
                "own": own.get(key, ""),
                "gate": now.gate,
                "threshold": now.threshold,
                "source": now.source,
                "applies_alone": now.gate == "auto" or (now.gate == "risk" and key == "memory.add"),
            }
        )
    row = WorkspaceGates.objects.filter(workspace=workspace).select_related("updated_by").first()
    context = {
        "workspace": workspace,
        "rows": rows,
        "choices": GateRule.choices,
        "threshold": own_threshold,
        "saved": row,
        "can_configure": request.user.has_perm("lessonboard.manage_tokens"),
    }
    return render(request, "reviews/gates.html", context)


@require_POST
@require_perm("lessonboard.manage_tokens")
def gates_save(request: HttpRequest, slug: str) -> HttpResponse:
    workspace = get_object_or_404(Workspace, slug=slug)
    rules = {key: request.POST.get(key, "") for key in GATE_KEYS}
    raw = request.POST.get("threshold", "").strip()
    try:
        threshold = float(raw) if raw else None
    except ValueError:
        messages.error(request, f"threshold: {raw!r} is not a number from 0 to 1; nothing was changed.")
        return redirect("reviews:gates", slug=slug)
    try:
        with transaction.atomic():
            set_workspace_gates(workspace, rules=rules, threshold=threshold, user=request.user)
    except GateRulesError as exc:
        messages.error(request, f"{exc}; nothing was changed.")
    else:
        messages.success(request, f"Gate rules of {workspace.slug} saved (audited as review.gates).")
    return redirect("reviews:gates", slug=slug)
