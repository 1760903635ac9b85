"""Pages: the runs list (filters in the URL), the compare page, and the per-agent modes."""

from __future__ import annotations

from datetime import datetime, time

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from lessonboard.diff import side_by_side
from lessonboard.models import LLMCall
from lessonboard.permissions import needs_role, require_perm, view_required
from refine import runs
from refine.chart import similarity_chart
from refine.forms import LessonProposalForm, ModeForm, RunFilterForm
from refine.models import AgentRefineMode, RefinePass, RefineRun, RefineRunQuerySet, RunStatus

PAGE_SIZE = 50


def _filtered(form: RunFilterForm) -> RefineRunQuerySet:
    qs = RefineRun.objects.all()
    if not form.is_valid():
        return qs
    data = form.cleaned_data
    if data["agent"]:
        qs = qs.filter(agent__iexact=data["agent"].strip())
    if data["status"]:
        qs = qs.filter(status=data["status"])
    if data["converged"]:
        qs = qs.filter(converged=data["converged"] == "yes")
    if data["rolled_back"]:
        qs = qs.filter(rolled_back=data["rolled_back"] == "yes")
    tz = timezone.get_current_timezone()
    if data["since"]:
        qs = qs.filter(created_at__gte=datetime.combine(data["since"], time.min, tzinfo=tz))
    if data["until"]:
        qs = qs.filter(created_at__lte=datetime.combine(data["until"], time.max, tzinfo=tz))
    return qs


@require_GET
@view_required
def runs_list(request: HttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    page = Paginator(_filtered(form).for_list(), PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "agents": RefineRun.objects.exclude(agent="")
        .values_list("agent", flat=True)
        .distinct()
        .order_by("agent")[:200],
    }
    template = "refine/runs.html#results" if request.htmx else "refine/runs.html"  # type: ignore[attr-defined]
    return render(request, template, context)


def _selected_pass(request: HttpRequest, passes: list[RefinePass], run: RefineRun) -> RefinePass | None:
    if not passes:
        return None
    raw = request.GET.get("pass", "")
    if raw.isascii() and raw.isdigit():  # not "²", which int() refuses
        for p in passes:
            if p.number == int(raw):
                return p
        raise Http404(f"run {run.pk} has no pass {raw}")
    return passes[-1]


def _score_rows(refine_pass: RefinePass) -> list[tuple[str, str | None, str | None]]:
    rows = []
    for scorer in ("char", "jaccard", "embedding"):
        original, previous = refine_pass.score("original", scorer), refine_pass.score("previous", scorer)
        if original is None and previous is None:
            continue
        rows.append(
            (
                scorer,
                None if original is None else f"{original:.4f}",
                None if previous is None else f"{previous:.4f}",
            )
        )
    return rows


@require_GET
@view_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(RefineRun, pk=run_id)
    passes = list(run.passes.all())
    selected = _selected_pass(request, passes, run)
    context: dict[str, object] = {
        "run": run,
        "passes": passes,
        "selected": selected,
        "chart": similarity_chart(passes) if passes else None,
        "llm_calls": list(LLMCall.objects.filter(refine_run_id=run.pk)[:50]),
        "can_operate": request.user.has_perm("lessonboard.operate_queue"),
        "can_review": request.user.has_perm("lessonboard.review_memory"),
        # Proposing a pass as a lesson is allowed to operators too (``propose_lesson``); the page offers it.
        "can_propose": request.user.has_perm("lessonboard.review_memory")
        or request.user.has_perm("lessonboard.operate_queue"),
    }
    if selected is not None:
        before = passes[selected.number - 2].revised if selected.number > 1 else run.original_draft
        context.update(
            {
                "vs_original": side_by_side(run.original_draft, selected.revised),
                "vs_previous": side_by_side(before, selected.revised),
                "previous_label": f"pass {selected.number - 1}" if selected.number > 1 else "original",
                "prev_number": selected.number - 1 if selected.number > 1 else None,
                "next_number": selected.number + 1 if selected.number < len(passes) else None,
                "lesson_form": LessonProposalForm(initial=runs.lesson_draft(selected)),
                "selected_scores": _score_rows(selected),
            }
        )
    if request.htmx:  # type: ignore[attr-defined]
        part = "run-body" if request.GET.get("part") == "body" else "compare"
        return render(request, f"refine/run.html#{part}", context)
    return render(request, "refine/run.html", context)


@require_POST
@require_perm("lessonboard.operate_queue")
def use_pass(request: HttpRequest, run_id: int, number: int) -> HttpResponse:
    run = get_object_or_404(RefineRun, pk=run_id)
    if not run.is_finished:
        messages.error(request, "The run is still in progress.")
    elif number != 0 and not run.passes.filter(number=number).exists():
        raise Http404(f"run {run.pk} has no pass {number}")
    else:
        runs.choose_output(run, number, user=request.user)
        messages.success(
            request, f"The output of run {run.pk} is now {'the original draft' if number == 0 else f'pass {number}'}."
        )
    return redirect(f"{reverse('refine:run', args=[run.pk])}?pass={number or 1}")


@require_POST
@view_required
def propose_lesson(request: HttpRequest, run_id: int, number: int) -> HttpResponse:
    # Proposing is safe for operators and reviewers alike: the proposal waits in the approval queue
    # until a reviewer decides it.
    if not (request.user.has_perm("lessonboard.review_memory") or request.user.has_perm("lessonboard.operate_queue")):
        raise PermissionDenied("This action needs the operator, reviewer or admin role.")
    refine_pass = get_object_or_404(RefinePass, run_id=run_id, number=number)
    form = LessonProposalForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The lesson needs a situation, a mistake and a correction.")
    else:
        proposal = runs.propose_lesson(refine_pass, **form.cleaned_data, user=request.user)
        if proposal is None:
            messages.error(request, "The proposal could not be staged; see the audit log.")
        else:
            messages.success(
                request, f"Proposal {proposal.pk} from pass {number} waits in the approval queue (Reviews)."
            )
    return redirect(f"{reverse('refine:run', args=[run_id])}?pass={number}")


@require_http_methods(["GET", "POST"])
@view_required
def modes(request: HttpRequest) -> HttpResponse:
    form = ModeForm()
    if request.method == "POST":
        if not request.user.has_perm("lessonboard.operate_queue"):
            raise PermissionDenied(needs_role("lessonboard.operate_queue"))
        form = ModeForm(request.POST)
        if form.is_valid():
            workspace = form.cleaned_data["workspace"]
            row = runs.set_mode(
                form.cleaned_data["agent"], form.cleaned_data["mode"], user=request.user, workspace=workspace
            )
            where = f" in {workspace.slug}" if workspace else " (no workspace)"
            messages.success(request, f"Refine mode for {row.agent}{where} is now {row.mode}.")
            return redirect("refine:modes")
    context = {
        "form": form,
        "modes": AgentRefineMode.objects.select_related("updated_by", "workspace").order_by("agent", "workspace__slug"),
        "can_operate": request.user.has_perm("lessonboard.operate_queue"),
        "statuses": RunStatus,
    }
    return render(request, "refine/modes.html", context, status=400 if form.errors else 200)
