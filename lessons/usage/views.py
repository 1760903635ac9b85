"""Pages of the learning loop: knowledge gaps (tasks nothing applied to) with dismiss and "write a lesson
for this". Reading needs ``lessonboard.view_dashboard``; dismissing needs ``lessonboard.review_memory``."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from lessonboard.models import AuditEvent
from lessonboard.permissions import require_perm, view_required
from lessons.usage import gaps

EDIT_PERM = "lessonboard.review_memory"
MAX_DISMISS = 10_000
PAGE_GROUPS = 200  # the biggest groups shown; a page of 1,000 one-task groups took over a second to render


@require_GET
@view_required
def gaps_page(request: HttpRequest) -> HttpResponse:
    workspace = request.GET.get("workspace", "")[:100]
    groups = gaps.open_gap_groups(workspace=workspace)
    rows: list[dict[str, Any]] = [
        {
            "group": group,
            "write_url": group.write_url,
            "ids": ",".join(str(pk) for pk in group.ids),
        }
        for group in groups[:PAGE_GROUPS]
    ]
    context = {
        "rows": [row for row in rows if not row["group"].off_domain],
        # Told apart: tasks no lesson of the workspace could address (docs/lessons.md#gaps).
        "off_rows": [row for row in rows if row["group"].off_domain],
        "more": max(0, len(groups) - PAGE_GROUPS),
        "workspace": workspace,
        "can_edit": request.user.has_perm(EDIT_PERM),
    }
    return render(request, "lessons/usage/gaps.html", context)


@require_POST
@require_perm(EDIT_PERM)
def dismiss_gap(request: HttpRequest) -> HttpResponse:
    raw = request.POST.get("ids", "")
    try:
        ids = [int(part) for part in raw.split(",") if part.strip()][:MAX_DISMISS]
    except ValueError:
        messages.error(request, "Nothing dismissed: the form did not name the gaps.")
        return redirect("lessons:gaps")
    closed = gaps.dismiss(ids)
    AuditEvent.record(
        "lesson.gap.dismiss", user=request.user, object_type="retrieval", object_ids=ids, result={"closed": closed}
    )
    messages.success(request, f"Dismissed {closed} task{'s' if closed != 1 else ''}: no lesson needed.")
    return redirect("lessons:gaps")


@require_GET
@view_required
def proposal_impact(request: HttpRequest, pk: int) -> HttpResponse:
    """What approving a pending lesson proposal would change for recent tasks (a partial the proposal
    page loads; also a page of its own without JavaScript)."""
    from django.shortcuts import get_object_or_404

    from lessons.review.models import Proposal
    from lessons.usage import impact

    row = get_object_or_404(Proposal, pk=pk, target="lesson")
    fields = row.lesson or {}
    result = impact.preview(
        situation=str(fields.get("situation", "")),
        mistake=str(fields.get("mistake", "")),
        correction=str(fields.get("correction", "")),
        tags=[str(t) for t in fields.get("tags", [])],
        workspace=row.workspace.slug,  # only the proposal's workspace's tasks
    )
    context = {"row": row, "impact": result, "top": impact.TOP}
    template = "lessons/usage/_impact.html" if getattr(request, "htmx", False) else "lessons/usage/impact.html"
    return render(request, template, context)
