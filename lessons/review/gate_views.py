"""A workspace's review-gate rules (docs/reviews.md#workspace-rules): every role reads what applies to each
write; changing a rule needs the admin role (``lessonboard.manage_tokens``: loosening a gate is a security
setting), goes through a CSRF-checked form and is audited with the rules before and after."""

from __future__ import annotations

from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from lessonboard.models import Workspace
from lessonboard.permissions import require_perm, view_required
from lessons.review.gates import GateRulesError, effective, set_workspace_gates, workspace_rules
from lessons.review.models import GATE_KEYS, GateRule, WorkspaceGates
from lessons.review.wording import TARGET_LABELS


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
