"""Workspace pages: the workspaces with a repository, one workspace's manifest, docs, proposals, events."""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Count, Max, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from lessonboard.models import Workspace
from lessonboard.permissions import require_perm, view_required
from lessons.reflect.forms import RejectForm, RepositoryForm
from lessons.reflect.gate import ProposalNotPending, approve_doc_proposal, reject_doc_proposal
from lessons.reflect.models import DocProposal, DocProposalStatus, ReflectEvent, ReflectManifestStatus
from lessons.reflect.repository import RepositoryError, attach_repository
from lessons.reflect.state import workspace_state

EVENTS_SHOWN = 50


WORKSPACES_PER_PAGE = 50


@require_GET
@view_required
def workspace_list(request: HttpRequest) -> HttpResponse:
    # Slug order, a page at a time (?after=<slug>): agents can create many workspaces, and the counts
    # below are computed for the page's rows only.
    after = request.GET.get("after", "")
    page = Workspace.objects.order_by("slug")
    if after:
        page = page.filter(slug__gt=after)
    slugs = list(page.values_list("slug", flat=True)[: WORKSPACES_PER_PAGE + 1])
    next_after = slugs[WORKSPACES_PER_PAGE - 1] if len(slugs) > WORKSPACES_PER_PAGE else None
    workspaces = (
        Workspace.objects.filter(slug__in=slugs[:WORKSPACES_PER_PAGE])
        .order_by("slug")
        .annotate(
            pending_proposals=Count(
                "doc_proposals", filter=Q(doc_proposals__status=DocProposalStatus.PENDING), distinct=True
            ),
            pending_manifests=Count(
                "reflect_manifests", filter=Q(reflect_manifests__status=ReflectManifestStatus.PENDING), distinct=True
            ),
            last_event=Max("reflect_events__created_at"),
        )
    )
    context = {"workspaces": workspaces, "next_after": next_after, "after": after}
    return render(request, "reflect/workspaces.html", context)


def _page_context(request: HttpRequest, workspace: Workspace) -> dict[str, object]:
    return {
        "workspace": workspace,
        "state": workspace_state(workspace),
        "events": ReflectEvent.objects.filter(workspace=workspace)[:EVENTS_SHOWN],
        "decided": DocProposal.objects.filter(workspace=workspace).exclude(status=DocProposalStatus.PENDING)[:20],
        "counts_by_agent": DocProposal.objects.filter(workspace=workspace).counts_by_agent(),
        "rejections_by_target": DocProposal.objects.filter(workspace=workspace).rejections_by_target(),
        "can_review": request.user.has_perm("lessonboard.review_memory"),
        "can_configure": request.user.has_perm("lessonboard.manage_tokens"),
        "repo_form": RepositoryForm(
            initial={
                "repo_path": workspace.repo_path,
                "bootstrap_dir": workspace.reflect_bootstrap_dir,
                "human_gate": workspace.reflect_human_gate,
            }
        ),
        "reject_form": RejectForm(),
    }


@require_GET
@view_required
def workspace_page(request: HttpRequest, slug: str) -> HttpResponse:
    workspace = get_object_or_404(Workspace, slug=slug)
    if request.htmx:  # type: ignore[attr-defined]
        # The 10-second poll refreshes the event history only: no repository reads.
        events = ReflectEvent.objects.filter(workspace=workspace)[:EVENTS_SHOWN]
        return render(request, "reflect/workspace.html#events", {"workspace": workspace, "events": events})
    return render(request, "reflect/workspace.html", _page_context(request, workspace))


@require_POST
@require_perm("lessonboard.manage_tokens")
def workspace_settings(request: HttpRequest, slug: str) -> HttpResponse:
    """Attach or change the repository: it lets agents with a full token write docs there."""
    workspace = get_object_or_404(Workspace, slug=slug)
    form = RepositoryForm(request.POST)
    if form.is_valid():
        try:
            attach_repository(
                workspace,
                repo_path=form.cleaned_data["repo_path"],
                bootstrap_dir=form.cleaned_data["bootstrap_dir"],
                human_gate=form.cleaned_data["human_gate"],
                user=request.user,
            )
        except RepositoryError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, "Repository settings saved.")
    else:
        messages.error(request, "; ".join(f"{k}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items()))
    return redirect("reflect:workspace", slug=workspace.slug)


@require_POST
@require_perm("lessonboard.review_memory")
def approve_proposal(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    proposal = get_object_or_404(DocProposal, pk=pk, workspace__slug=slug)
    try:
        decision = approve_doc_proposal(proposal, user=request.user)
    except ProposalNotPending as exc:
        messages.error(request, str(exc))
    else:
        if decision.ok:
            messages.success(request, f"Proposal #{pk} approved: {decision.message}.")
        else:
            messages.error(request, f"Proposal #{pk} could not be approved ({decision.status}): {decision.message}")
    return redirect("reflect:workspace", slug=slug)


@require_POST
@require_perm("lessonboard.review_memory")
def reject_proposal(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    proposal = get_object_or_404(DocProposal, pk=pk, workspace__slug=slug)
    form = RejectForm(request.POST)
    if not form.is_valid():
        messages.error(request, "A reason is required to reject a proposal.")
        return redirect("reflect:workspace", slug=slug)
    try:
        decision = reject_doc_proposal(proposal, user=request.user, reason=form.cleaned_data["reason"])
    except ProposalNotPending as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, decision.message)
    return redirect("reflect:workspace", slug=slug)
