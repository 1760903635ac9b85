"""DLQ triage pages under /queue/: thin function views (read with ``lessonq.triage.queries``, act with
``lessonq.dlq`` and ``lessonq.bulk``). Every action checks ``lessonboard.operate_queue`` here, in the
view: a viewer posting directly gets 403 and nothing changes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.db.models.functions import Length, Substr
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from lessonboard import breaker
from lessonboard.llm import ratelimit
from lessonboard.models import LLMCall
from lessonboard.permissions import require_perm, view_required
from lessonboard.timeouts import statement_timeout
from lessonq import bulk, dlq, retention, root_cause
from lessonq.forms import BulkForm, JobFilterForm, LessonDraftForm
from lessonq.models import Job
from lessonq.paths import base
from lessonq.triage import queries as triage
from lessonq.triage.metrics import OPERATOR_ACTIONS
from lessonq.triage.models import BulkAction, BulkItem, ItemOutcome, RetentionRun
from lessonq.wal import quarantined

operate_required = require_perm("lessonboard.operate_queue")


def _is_htmx(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False))


def _queue_url(params: dict[str, str]) -> str:
    return reverse("queue:index") + (f"?{urlencode(params)}" if params else "")


def _quarantine() -> dict[str, object]:
    """This node's quarantined records with their reasons (docs/operations.md#poison-records)."""
    records, total = quarantined(base() / "quarantine", limit=20)
    return {"records": records, "total": total, "path": str(base() / "quarantine")}


@require_GET
@view_required
def index(request: HttpRequest) -> HttpResponse:
    form = JobFilterForm(request.GET or None)
    flt = form.job_filter()
    with statement_timeout("search" if flt.q else "list"):
        page = triage.keyset(
            flt.apply(), sort=flt.sort, cursor=request.GET.get("after"), size=settings.LESSONQ_TRIAGE_PAGE_SIZE
        )
    query = flt.as_dict()
    context = {
        "form": form,
        "filter": flt,
        "search_refused": triage.search_refusal(flt.tab, flt.q),
        "tab": triage.TABS[flt.tab],
        "tabs": _tabs(flt),
        "page": page,
        "query": urlencode(query),
        "next_url": _queue_url({**query, "after": page.next_cursor}) if page.next_cursor else "",
        "first_url": _queue_url(query),
        "is_deep": bool(request.GET.get("after")),
        "can_operate": request.user.has_perm("lessonboard.operate_queue"),
        "recent_bulk": BulkAction.objects.select_related("created_by")[:5],
        # row links built from one reverse (50 rows x 4 links of reverse() cost ~20 ms a page)
        "job_base": reverse("queue:job", args=["0" * 16]).replace("0" * 16 + "/", ""),
        "here": request.get_full_path(),
        "llm_outage": breaker.outage(),
        "llm_pause": ratelimit.current(),
        "quarantine": _quarantine(),
    }
    if _is_htmx(request):
        # The results, plus the tab bar out of band so its links keep the new filter.
        html = render_to_string("queue/index.html#results", context, request=request)
        html += render_to_string("queue/index.html#tabs", {**context, "oob": True}, request=request)
        return HttpResponse(html)
    return render(request, "queue/index.html", context)


def _tabs(flt: triage.JobFilter) -> list[dict[str, object]]:
    counts = triage.tab_counts()
    keep = {k: v for k, v in flt.as_dict().items() if k not in ("tab", "group")}
    return [
        {
            "tab": tab,
            "count": counts[slug],
            "url": _queue_url({**keep, "tab": slug}),
            "active": slug == flt.tab,
        }
        for slug, tab in triage.TABS.items()
    ]


@require_GET
@view_required
def counts(request: HttpRequest) -> HttpResponse:
    """The tab bar with live counts (polled; cheap: cached and shared between viewers)."""
    flt = JobFilterForm(request.GET or None).job_filter()
    return render(request, "queue/index.html#tabs", {"tabs": _tabs(flt), "query": urlencode(flt.as_dict())})


@require_GET
@view_required
def job_detail(request: HttpRequest, job_id: str) -> HttpResponse:
    # Payloads come as bounded previews cut in SQL (a job may carry 14 MiB); the full text downloads.
    job = get_object_or_404(Job.objects.with_previews().select_related("workspace", "lesson"), pk=job_id.lower())
    same_count, same, similar = triage.similar_dead_jobs(job)
    method, lessons, lessons_none = triage.similar_lessons(job)
    context = {
        "job": job,
        "attempts": list(job.attempt_rows.all()),
        "llm_calls": list(LLMCall.objects.filter(job_id=job.id)[:50]),
        "timeline": triage.timeline(job),
        "record": triage.record_info(job),
        "same_count": same_count,
        "same": same,
        "similar": similar,
        "lessons": lessons,
        "lessons_method": method,
        "lessons_none": lessons_none,
        "payloads": [_payload(job, name, label) for name, label in PAYLOAD_LABELS.items()],
        "group_url": _queue_url({"tab": "dead", "group": job.fingerprint}),
        "audit_url": reverse("audit:list") + "?" + urlencode({"object_type": "queue.job", "object_id": job.id}),
        "can_operate": request.user.has_perm("lessonboard.operate_queue"),
        "can_propose": request.user.has_perm("lessonboard.operate_queue")
        or request.user.has_perm("lessonboard.review_memory"),
    }
    return render(request, "queue/job.html", context)


PAYLOAD_LABELS = {"task": "Task", "output": "Agent output", "outcome": "Outcome", "last_error": "Last error"}
TEXT_CHUNK_CHARS = 1 << 20


@dataclass(frozen=True)
class Payload:
    name: str
    label: str
    preview: str
    size: int  # bytes
    truncated: bool


def _payload(job: Job, name: str, label: str) -> Payload:
    preview: str = getattr(job, f"{name}_preview") or ""
    size: int = getattr(job, f"{name}_bytes") or 0
    return Payload(name, label, preview, size, truncated=len(preview.encode()) < size)


@require_GET
@view_required
def job_text(request: HttpRequest, job_id: str, field: str) -> HttpResponse:
    """One payload of a job in full, as a text download, read from the database 1 Mi characters at a
    time so a 14 MiB payload never sits whole in a web worker."""
    if field not in PAYLOAD_LABELS:
        raise Http404("no such field")
    pk = job_id.lower()
    size = Job.objects.filter(pk=pk).annotate(n=Length(field)).values_list("n", flat=True).first()
    if size is None:
        raise Http404("no such job")

    def chunks() -> Iterator[str]:
        for start in range(1, size + 1, TEXT_CHUNK_CHARS):
            part = Substr(field, start, TEXT_CHUNK_CHARS)
            yield Job.objects.filter(pk=pk).annotate(part=part).values_list("part", flat=True).first() or ""

    response = StreamingHttpResponse(chunks(), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="job-{pk}-{field}.txt"'
    return cast(HttpResponse, response)  # the permission decorators are typed for HttpResponse


def _back(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next", "")
    return target if target.startswith("/queue/") else default


def not_dead_text(job_id: str, fallback: str) -> str:
    """Why a retry or purge found nothing to act on, for a person: usually another operator got there
    first. ``fallback`` (the runner's own wording, kept for the API) when the job is unknown."""
    job = Job.objects.filter(pk=job_id.lower()).first()
    if job is None:
        return f"Job {job_id} does not exist (any more): nothing to retry."
    if job.state == "dead":
        return fallback
    return (
        f"Job {job_id} is no longer dead — it is {job.get_state_display().lower()} now: "
        "someone already retried or purged it. Nothing was changed."
    )


@require_POST
@operate_required
def job_retry(request: HttpRequest, job_id: str) -> HttpResponse:
    try:
        dlq.retry(job_id, user=request.user, reason=request.POST.get("reason", "")[:500])
        messages.success(request, f"Job {job_id} sent back to the queue.")
        OPERATOR_ACTIONS.labels("retry").inc()
    except dlq.DLQError as exc:
        messages.error(request, not_dead_text(job_id, str(exc)))
    triage.forget_counts()
    return redirect(_back(request, reverse("queue:job", args=[job_id])))


@require_POST
@operate_required
def job_retry_now(request: HttpRequest, job_id: str) -> HttpResponse:
    """A job waiting to retry runs now instead of after its backoff."""
    try:
        dlq.retry_now(job_id, user=request.user, reason=request.POST.get("reason", "")[:500])
        messages.success(request, f"Job {job_id} runs now instead of waiting for its next retry.")
        OPERATOR_ACTIONS.labels("retry_now").inc()
    except dlq.DLQError:
        job = Job.objects.filter(pk=job_id.lower()).first()
        state = job.get_state_display() if job is not None else "unknown"
        messages.error(request, f"Job {job_id} is not waiting to retry any more (it is {state}): nothing changed.")
    triage.forget_counts()
    return redirect(_back(request, reverse("queue:index") + "?tab=retrying"))


@require_POST
@operate_required
def job_purge(request: HttpRequest, job_id: str) -> HttpResponse:
    job = Job.objects.filter(pk=job_id.lower()).first()
    if job is None or job.state != "dead":
        messages.error(request, not_dead_text(job_id, "").replace("nothing to retry", "nothing to purge"))
        return redirect(_back(request, reverse("queue:index")))
    try:
        dlq.purge(job_id, user=request.user, reason=request.POST.get("reason", "")[:500])
        messages.success(request, f"Job {job_id} purged.")
        OPERATOR_ACTIONS.labels("purge").inc()
    except dlq.DLQError as exc:
        messages.error(request, not_dead_text(job_id, str(exc)).replace("nothing to retry", "nothing to purge"))
    triage.forget_counts()
    return redirect(_back(request, reverse("queue:index") + "?tab=dead"))


def _bulk_scope(form: BulkForm) -> tuple[triage.JobFilter, QuerySet[Job], int | None]:
    flt = form.job_filter()
    if form.cleaned_data["scope"] == "selection":
        return flt, Job.objects.filter(pk__in=form.ids), len(set(form.ids))
    return flt, flt.apply(), None


@require_POST
@operate_required
def bulk_preview(request: HttpRequest) -> HttpResponse:
    """Step one of a bulk action: the count and eligibility breakdown, and a confirm button."""
    data = request.POST.copy()
    if not data.get("scope"):  # the queue page's buttons say their scope in the URL (formaction)
        data["scope"] = request.GET.get("scope", "")
    form = BulkForm(data)
    if not form.is_valid():
        return render(request, "queue/bulk_preview.html", {"form": form, "preview": None}, status=400)
    flt, jobs, requested = _bulk_scope(form)
    preview = triage.preview(
        form.cleaned_data["kind"],
        jobs,
        scope=form.cleaned_data["scope"],
        sort=flt.sort,
        requested=requested,
    )
    context = {
        "form": form,
        "preview": preview,
        "filter": flt,
        "filter_items": sorted(flt.as_dict().items()),
        "ids": form.ids,
        "back_url": _queue_url(flt.as_dict()),
    }
    return render(request, "queue/bulk_preview.html", context)


@require_POST
@operate_required
def bulk_start(request: HttpRequest) -> HttpResponse:
    """Step two: freeze the eligible ids (recomputed now, capped) and run them in the background."""
    form = BulkForm(request.POST)
    if not form.is_valid():
        return render(request, "queue/bulk_preview.html", {"form": form, "preview": None}, status=400)
    flt, jobs, requested = _bulk_scope(form)
    kind, scope = form.cleaned_data["kind"], form.cleaned_data["scope"]
    preview = triage.preview(kind, jobs, scope=scope, sort=flt.sort, requested=requested)
    if not preview.run_ids:
        messages.error(request, "Nothing eligible to act on (only dead jobs can be retried or purged).")
        return redirect(_queue_url(flt.as_dict()))
    action = bulk.start(
        kind,
        preview.run_ids,
        scope=scope,
        filter={**flt.as_dict(), **({"ids": form.ids} if scope == "selection" else {})},
        matched=preview.matched,
        user=request.user,
    )
    OPERATOR_ACTIONS.labels(f"bulk_{kind}").inc(len(preview.run_ids))
    return redirect("queue:bulk", bulk_id=action.pk)


def _bulk_context(action: BulkAction) -> dict[str, object]:
    items = BulkItem.objects.filter(bulk=action)
    return {
        "bulk": action,
        "failed_items": list(items.filter(outcome=ItemOutcome.FAILED)[:200]),
        "items": list(items[:100]),
        "audit_url": reverse("audit:list") + "?" + urlencode({"action": f"queue.bulk_{action.kind}"}),
    }


@require_GET
@view_required
def bulk_detail(request: HttpRequest, bulk_id: int) -> HttpResponse:
    action = get_object_or_404(BulkAction.objects.select_related("created_by"), pk=bulk_id)
    context = {**_bulk_context(action), "can_operate": request.user.has_perm("lessonboard.operate_queue")}
    if _is_htmx(request):
        html = render_to_string("queue/bulk.html#progress", context, request=request)
        # Finished: this response replaces the polling element and tells htmx to stop (status 286).
        return HttpResponseStopPolling(html) if action.is_finished else HttpResponse(html)
    return render(request, "queue/bulk.html", context)


@require_POST
@operate_required
def bulk_cancel(request: HttpRequest, bulk_id: int) -> HttpResponse:
    action = get_object_or_404(BulkAction, pk=bulk_id)
    outcome = bulk.cancel(action, user=request.user)
    if outcome:
        messages.success(request, f"Bulk {action.kind} #{action.pk}: {outcome}.")
    else:
        messages.error(request, f"Bulk {action.kind} #{action.pk} has already finished.")
    return redirect("queue:bulk", bulk_id=action.pk)


@require_GET
@view_required
def groups(request: HttpRequest) -> HttpResponse:
    """Error groups (fingerprints) with counts over time windows, each opening the filtered list; and
    the retention status."""
    dead, cap = retention.distance_to_cap()
    context = {
        "groups": [
            {
                "group": g,
                "all_url": _queue_url({"tab": "dead", "group": g.fingerprint}),
                "windows": [
                    (name, n, _queue_url({"tab": "dead", "group": g.fingerprint, "died": name}))
                    for name, n in g.windows.items()
                ],
            }
            for g in triage.error_groups()
        ],
        "dead": dead,
        "cap": cap,
        "remaining": cap - dead,
        "max_age_days": settings.LESSONQ_DLQ_MAX_AGE / 86400,
        "runs": RetentionRun.objects.all()[:10],
        "can_operate": request.user.has_perm("lessonboard.operate_queue"),
    }
    template = "queue/groups.html#groups" if _is_htmx(request) else "queue/groups.html"
    return render(request, template, context)


@require_http_methods(["GET", "POST"])
@view_required
def propose_lesson(request: HttpRequest) -> HttpResponse:
    """ "Propose a lesson" from a dead job (``?job=``) or an error group (``?group=``): a prefilled draft,
    staged as a pending lesson proposal for a reviewer. Operators and reviewers may propose; proposing
    changes nothing until a reviewer approves."""
    if not (request.user.has_perm("lessonboard.review_memory") or request.user.has_perm("lessonboard.operate_queue")):
        raise PermissionDenied("proposing a lesson needs the operator or reviewer role")
    params = request.POST if request.method == "POST" else request.GET
    job_id, group = params.get("job", "")[:16].lower(), params.get("group", "")[:16]
    if job_id:
        draft = root_cause.draft_from_job(get_object_or_404(Job.objects.select_related("workspace"), pk=job_id))
    elif group and (found := root_cause.draft_from_group(group)) is not None:
        draft = found
    else:
        raise Http404("no dead job or error group to draw a lesson from")
    if request.method == "POST":
        form = LessonDraftForm(request.POST)
        if form.is_valid():
            draft.situation = form.cleaned_data["situation"]
            draft.mistake = form.cleaned_data["mistake"]
            draft.correction = form.cleaned_data["correction"]
            draft.tags = form.cleaned_data["tags"]
            proposal = root_cause.propose(draft, user=request.user)
            if proposal is None:
                messages.error(request, "The lesson could not be staged; the audit log has the reason.")
            else:
                messages.success(request, f"Lesson proposal #{proposal.pk} now waits for a reviewer.")
                return redirect("reviews:proposal", pk=proposal.pk)
    else:
        form = LessonDraftForm(
            initial={"situation": draft.situation, "mistake": draft.mistake, "tags": ", ".join(draft.tags)}
        )
    context = {"form": form, "draft": draft, "job_id": job_id, "group": group}
    return render(request, "queue/propose_lesson.html", context)
