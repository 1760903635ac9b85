"""Lesson pages: search (HTMX live), detail with history and restore, edit, archive, merge, manual add.

Looking needs ``lessonboard.view_dashboard``; every change needs ``lessonboard.review_memory`` (the
reviewer and admin roles), checked here in the view.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import F
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from lessonboard.models import AuditEvent, Workspace
from lessonboard.permissions import require_perm, view_required
from lessonboard.timeouts import statement_timeout
from lessons import doc2query, embeddings, retrieval
from lessons.forms import LessonEditForm, ManualLessonForm, MergeForm, SearchForm, split_tags
from lessons.models import Lesson, LessonScope, LessonStatus, LessonVersion
from lessons.store import (
    LessonStateError,
    edit_lesson,
    latest_version,
    merge_lessons,
    persist_manual,
    restore_version,
    set_scope,
    set_status,
)
from lessons.usage.models import LessonUsage

EDIT_PERM = "lessonboard.review_memory"
PAGE_SIZE = 50
# The list's orders (``?sort=``); usefulness is NULL until enough outcomes exist, and those sort last.
SORTS: dict[str, tuple[Any, ...]] = {
    "newest": ("-created_at", "-id"),
    "most_useful": (F("usage__usefulness").desc(nulls_last=True), "-id"),
    "least_useful": (F("usage__usefulness").asc(nulls_last=True), "-id"),
    "most_served": (F("usage__served").desc(nulls_last=True), "-id"),
    "flagged": (F("usage__flagged").desc(nulls_last=True), F("usage__usefulness").asc(nulls_last=True), "-id"),
    # Repeated failures (docs/queue.md#repeated-failures): how often a lesson's failure was reported.
    "most_repeated": ("-occurrences", F("last_seen").desc(nulls_last=True), "-id"),
    "last_seen": (F("last_seen").desc(nulls_last=True), "-id"),
}


def _actor(request: HttpRequest) -> str:
    return f"user:{request.user.get_username()}"


def _filters(form: SearchForm) -> retrieval.Filters:
    data = form.cleaned_data
    return retrieval.Filters(
        workspace=data.get("workspace") or "",
        tags=split_tags(data.get("tags") or ""),
        trigger=data.get("trigger") or "",
        agent=data.get("agent") or "",
        status=data.get("status") or "",
        since=data.get("since"),
        until=data.get("until"),
    )


@require_GET
@view_required
def search_page(request: HttpRequest) -> HttpResponse:
    form = SearchForm(request.GET)
    hits: list[retrieval.Hit] = []
    lessons: list[Lesson] = []
    page = None
    explanation: dict[str, Any] = {}
    similar_to: Lesson | None = None
    if form.is_valid():
        filters = _filters(form)
        query = form.cleaned_data["q"].strip()
        similar = form.cleaned_data.get("similar")
        if similar:
            similar_to = Lesson.objects.filter(pk=similar).first()
        if similar_to is not None:
            with statement_timeout("search"):
                result = retrieval.similar_to(similar_to, k=10, filters=filters)
            hits, explanation = result.hits, result.explanation
        elif query:
            # What an agent of that workspace would search: its lessons and the shared tier.
            filters = dataclasses.replace(filters, scope="all")
            with statement_timeout("search"):
                result = retrieval.search(query, k=20, filters=filters, floor=False)
            hits, explanation = result.hits, result.explanation
        else:
            # A page at a time, with the total, in the chosen order (newest first by default).
            listing = filters.apply(Lesson.objects.for_list().select_related("workspace", "usage")).order_by(
                *SORTS[form.cleaned_data.get("sort") or "newest"]
            )
            with statement_timeout("list"):
                page = Paginator(listing, PAGE_SIZE).get_page(request.GET.get("page"))
                lessons = list(page.object_list)
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "hits": hits,
        "lessons": lessons,
        "page": page,
        "page_query": query.urlencode(),
        "explanation": explanation,
        "terms": explanation.get("terms", []),
        "similar_to": similar_to,
        "embedding_status": embeddings.describe(),
        "lexical_only": embeddings.expected_model_id() is None,
        "can_edit": request.user.has_perm(EDIT_PERM),
        "manual_form": ManualLessonForm(initial={"text": request.GET.get("new", "")[:20_000]}),
        "workspaces": Workspace.objects.order_by("slug").values_list("slug", flat=True)[:200],
    }
    template = "lessons/search.html#results" if request.htmx else "lessons/search.html"  # type: ignore[attr-defined]
    return render(request, template, context)


@require_POST
@require_perm(EDIT_PERM)
def create_page(request: HttpRequest) -> HttpResponse:
    form = ManualLessonForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The lesson needs text (and a valid workspace slug, if given).")
        return redirect("lessons:search")
    slug = form.cleaned_data["workspace"]
    workspace = Workspace.objects.for_slug(slug) if slug else None
    with transaction.atomic():  # the action and its audit event commit together
        result = persist_manual(
            form.cleaned_data["text"].strip(), workspace=workspace, actor=_actor(request), user=request.user
        )
        AuditEvent.record(
            "lesson.create",
            user=request.user,
            object_type="lesson",
            object_ids=[result.lesson.pk],
            result={"action": result.action},
        )
    messages.success(request, f"lesson persisted to long-term memory (category=lesson) — {result.action}")
    return redirect("lessons:detail", pk=result.lesson.pk)


def _job_url(job_id: str | None) -> str | None:
    if not job_id:
        return None
    for name in ("queue:job", "queue:detail"):
        try:
            return reverse(name, args=[job_id])
        except NoReverseMatch:
            continue
    return None


def _diff(before: dict[str, Any] | None, after: dict[str, Any]) -> list[tuple[str, str]]:
    """Changed lines between two snapshots as ``(kind, text)``, kind in ``add``/``del``."""

    def lines(snap: dict[str, Any] | None) -> list[str]:
        if not snap:
            return []
        return [
            *str(snap.get("content", "")).splitlines(),
            f"TAGS: {', '.join(snap.get('tags', []))}",
            f"CONFIDENCE: {snap.get('confidence')}",
            f"STATUS: {snap.get('status')}",
        ]

    out: list[tuple[str, str]] = []
    for line in difflib.ndiff(lines(before), lines(after)):
        if line.startswith("+ "):
            out.append(("add", line[2:]))
        elif line.startswith("- "):
            out.append(("del", line[2:]))
    return out


@require_GET
@view_required
def detail_page(request: HttpRequest, pk: int) -> HttpResponse:
    lesson = get_object_or_404(Lesson.objects.select_related("workspace", "superseded_by"), pk=pk)
    versions = list(lesson.versions.select_related("actor_user").order_by("number"))
    history = []
    previous: dict[str, Any] | None = None
    for version in versions:
        history.append({"version": version, "diff": _diff(previous, version.snapshot)})
        previous = version.snapshot
    history.reverse()
    context = {
        "lesson": lesson,
        "history": history,
        "current_number": versions[-1].number if versions else None,
        "job_url": _job_url(lesson.source_job_id),
        "superseding": Lesson.objects.filter(superseded_by=lesson).only("id", "situation", "status"),
        "can_edit": request.user.has_perm(EDIT_PERM),
        "embedding_status": embeddings.describe(),
        "applies_when": doc2query.page_state(lesson),
        "usage": LessonUsage.objects.filter(lesson=lesson).first(),
        "min_samples": settings.USEFULNESS_MIN_SAMPLES,
    }
    return render(request, "lessons/detail.html", context)


@require_http_methods(["GET", "POST"])
@require_perm(EDIT_PERM)
def edit_page(request: HttpRequest, pk: int) -> HttpResponse:
    lesson = get_object_or_404(Lesson, pk=pk)
    if lesson.status == LessonStatus.DELETED:
        messages.error(request, "This lesson is deleted: make it active again before editing it.")
        return redirect("lessons:detail", pk=pk)
    if request.method == "POST":
        form = LessonEditForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            latest = latest_version(lesson)
            try:
                with transaction.atomic():  # the action and its audit event commit together
                    edited = _edit(request, lesson, data, latest)
            except LessonStateError as exc:
                messages.error(request, str(exc))
                return redirect("lessons:detail", pk=pk)
            if edited:
                messages.success(request, "Lesson saved as a new version.")
            else:
                messages.info(request, "Nothing changed: no new version.")
            return redirect("lessons:detail", pk=pk)
    else:
        form = LessonEditForm(
            initial={
                "situation": lesson.situation,
                "mistake": lesson.mistake,
                "correction": lesson.correction,
                "tags": ", ".join(lesson.tags),
                "trigger": lesson.trigger,
                "confidence": lesson.confidence,
                "lang": lesson.lang,
            }
        )
    return render(request, "lessons/edit.html", {"lesson": lesson, "form": form})


def _edit(request: HttpRequest, lesson: Lesson, data: dict[str, Any], latest: int | None) -> bool:
    """The edit form's change and its audit event; False when it changed nothing (no version written)."""
    edit_lesson(
        lesson,
        situation=data["situation"],
        mistake=data["mistake"],
        correction=data["correction"],
        tags=data["tags"],
        trigger=data["trigger"],
        confidence=data["confidence"],
        actor=_actor(request),
        user=request.user,
        reason=data["reason"],
        lang=data["lang"],
    )
    if latest_version(lesson) == latest:
        return False
    AuditEvent.record(
        "lesson.edit", user=request.user, object_type="lesson", object_ids=[lesson.pk], reason=data["reason"]
    )
    return True


@require_POST
@require_perm(EDIT_PERM)
def change_status(request: HttpRequest, pk: int) -> HttpResponse:
    lesson = get_object_or_404(Lesson, pk=pk)
    status = request.POST.get("status", "")
    if status not in (LessonStatus.ACTIVE, LessonStatus.ARCHIVED):
        messages.error(request, "Unknown status.")
        return redirect("lessons:detail", pk=pk)
    reason = request.POST.get("reason", "")[:2000]
    try:
        with transaction.atomic():  # the action and its audit event commit together
            set_status(lesson, status, actor=_actor(request), user=request.user, reason=reason)
            AuditEvent.record(
                f"lesson.{'archive' if status == LessonStatus.ARCHIVED else 'unarchive'}",
                user=request.user,
                object_type="lesson",
                object_ids=[pk],
                reason=reason,
            )
    except LessonStateError as exc:  # already so, or a deleted lesson to archive: nothing recorded
        messages.error(request, str(exc))
        return redirect("lessons:detail", pk=pk)
    messages.success(request, "Lesson archived." if status == LessonStatus.ARCHIVED else "Lesson is active again.")
    return redirect("lessons:detail", pk=pk)


@require_POST
@require_perm(EDIT_PERM)
def change_scope(request: HttpRequest, pk: int) -> HttpResponse:
    """Share the lesson with every workspace, or keep it in its own (docs/lessons.md#scopes)."""
    lesson = get_object_or_404(Lesson, pk=pk)
    scope = request.POST.get("scope", "")
    if scope not in LessonScope.values:
        messages.error(request, "Unknown scope.")
        return redirect("lessons:detail", pk=pk)
    if scope != lesson.scope:
        reason = request.POST.get("reason", "")[:2000]
        try:
            with transaction.atomic():  # the action and its audit event commit together
                set_scope(lesson, scope, actor=_actor(request), user=request.user, reason=reason)
                AuditEvent.record(
                    "lesson.share" if scope == LessonScope.SHARED else "lesson.unshare",
                    user=request.user,
                    object_type="lesson",
                    object_ids=[pk],
                    reason=reason,
                )
        except LessonStateError as exc:
            messages.error(request, str(exc))
            return redirect("lessons:detail", pk=pk)
    shared = scope == LessonScope.SHARED
    messages.success(request, "Lesson shared with every workspace." if shared else "Lesson kept in its workspace.")
    return redirect("lessons:detail", pk=pk)


@require_POST
@require_perm(EDIT_PERM)
def restore(request: HttpRequest, pk: int, number: int) -> HttpResponse:
    lesson = get_object_or_404(Lesson, pk=pk)
    get_object_or_404(LessonVersion, lesson=lesson, number=number)
    with transaction.atomic():  # the action and its audit event commit together
        restore_version(lesson, number, actor=_actor(request), user=request.user)
        AuditEvent.record(
            "lesson.restore", user=request.user, object_type="lesson", object_ids=[pk], result={"version": number}
        )
    messages.success(request, f"Version {number} restored (as a new version).")
    return redirect("lessons:detail", pk=pk)


@require_http_methods(["GET", "POST"])
@require_perm(EDIT_PERM)
def merge_page(request: HttpRequest) -> HttpResponse:
    form = MergeForm(request.POST if request.method == "POST" else request.GET or None)
    keep = other = None
    if form.is_bound and form.is_valid():
        keep = Lesson.objects.filter(pk=form.cleaned_data["keep"]).first()
        other = Lesson.objects.filter(pk=form.cleaned_data["other"]).first()
        if keep is None or other is None:
            form.add_error(None, "both lessons must exist")
        elif LessonStatus.DELETED in (keep.status, other.status):
            form.add_error(None, "a deleted lesson cannot be merged: make it active again first")
        elif request.method == "POST":
            try:
                with transaction.atomic():  # the action and its audit event commit together
                    merged = merge_lessons(
                        keep, other, actor=_actor(request), user=request.user, reason=form.cleaned_data["reason"]
                    )
                    AuditEvent.record(
                        "lesson.merge", user=request.user, object_type="lesson", object_ids=[keep.pk, other.pk]
                    )
            except LessonStateError as exc:  # deleted since the check above
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Lesson #{other.pk} merged into #{merged.pk}.")
                return redirect("lessons:detail", pk=merged.pk)
    return render(request, "lessons/merge.html", {"form": form, "keep": keep, "other": other})
