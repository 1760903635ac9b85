"""The audit log page: who did what to which objects, filterable, keyset-paginated."""

from __future__ import annotations

import json
from datetime import datetime, time
from typing import Any

from django import forms
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from lessonboard.models import AuditEvent
from lessonboard.pagination import keyset_page
from lessonboard.permissions import view_required

PAGE_SIZE = 50


class AuditFilterForm(forms.Form):
    action = forms.CharField(required=False, max_length=100)
    actor = forms.CharField(required=False, max_length=150, help_text="user name or token name")
    object_type = forms.CharField(required=False, max_length=100, label="Object type")
    object_id = forms.CharField(required=False, max_length=100, label="Object id")
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def filter(self, qs: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        data: dict[str, Any] = self.cleaned_data
        if data.get("action"):
            qs = qs.filter(action__startswith=data["action"])
        if data.get("actor"):
            name = data["actor"]
            qs = qs.filter(Q(actor_user__username=name) | Q(actor_token__name=name))
        if data.get("object_type"):
            qs = qs.filter(object_type=data["object_type"])
        if data.get("object_id"):
            qs = qs.filter(object_ids__contains=[data["object_id"]])
        tz = timezone.get_current_timezone()
        if data.get("since"):
            qs = qs.filter(created_at__gte=datetime.combine(data["since"], time.min, tzinfo=tz))
        if data.get("until"):
            qs = qs.filter(created_at__lte=datetime.combine(data["until"], time.max, tzinfo=tz))
        return qs


# Where an audited object is shown: object type → URL name taking the id (a row links its objects).
OBJECT_PAGES: dict[str, str] = {
    "lesson": "lessons:detail",
    "proposal": "reviews:proposal",
    "queue.job": "queue:job",
    "queue.bulk": "queue:bulk",
    "refine_run": "refine:run",
    "workspace": "reflect:workspace",
}


def _page_keys(object_type: str, ids: list[Any]) -> dict[str, Any]:
    """What each id's page is addressed by: the id itself, except workspaces, audited by primary key and
    shown by slug (a deleted workspace gets no link)."""
    if object_type != "workspace":
        return {str(raw): raw for raw in ids}
    from lessonboard.models import Workspace

    pks = [int(raw) for raw in ids if str(raw).isdigit()]
    return {str(pk): slug for pk, slug in Workspace.objects.filter(pk__in=pks).values_list("pk", "slug")}


def object_links(event: AuditEvent) -> list[tuple[str, str | None]]:
    """``(id, url or None)`` for each object of an event (the first 20)."""
    name = OBJECT_PAGES.get(event.object_type)
    links: list[tuple[str, str | None]] = []
    ids = event.ids_head if hasattr(event, "ids_head") else event.object_ids  # the list reads only the head
    heads = (ids or [])[:20]
    keys = _page_keys(event.object_type, heads)
    for raw in heads:
        url = None
        if name is not None and keys.get(str(raw)) is not None:
            try:
                url = reverse(name, args=[keys[str(raw)]])
            except NoReverseMatch:
                url = None
        links.append((str(raw), url))
    return links


def result_items(value: Any) -> list[tuple[str, str]]:
    """An event's result as "key: value" pairs (a dict), or one unnamed item, instead of a Python repr."""
    if value in (None, "", {}, []):
        return []
    if isinstance(value, dict):
        return [(str(k), v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)) for k, v in value.items()]
    return [("", value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))]


def preview_items(preview: str | None) -> list[tuple[str, str]]:
    """A result or filter cut in SQL (``AuditEvent.objects.for_list``): as fields when the cut left whole
    JSON, else the cut text itself."""
    if not preview or preview in ("{}", "null"):
        return []
    try:
        return result_items(json.loads(preview))
    except ValueError:
        return [("", preview + "…")]


@require_GET
@view_required
def audit_list(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET or None)
    qs: QuerySet[AuditEvent] = AuditEvent.objects.for_list().select_related("actor_user", "actor_token")
    if form.is_bound and form.is_valid():
        qs = form.filter(qs)
    page = keyset_page(qs, cursor=request.GET.get("after"), size=PAGE_SIZE, time_field="created_at", pk_field="id")
    for event in page.rows:
        event.links = object_links(event)
        event.result_items = preview_items(event.result_preview)
        event.filter_items = preview_items(event.filter_preview)
    query = request.GET.copy()
    query.pop("after", None)
    context = {
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "actions": AuditEvent.objects.order_by().values_list("action", flat=True).distinct()[:200],
    }
    template = "lessonboard/audit.html#results" if request.htmx else "lessonboard/audit.html"  # type: ignore[attr-defined]
    return render(request, template, context)
