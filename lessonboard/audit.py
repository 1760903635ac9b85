"""The audit log page: who did what to which objects, filterable, keyset-paginated."""

from __future__ import annotations

from datetime import datetime, time
from typing import Any

from django import forms
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
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


@require_GET
@view_required
def audit_list(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET or None)
    qs = AuditEvent.objects.select_related("actor_user", "actor_token")
    if form.is_bound and form.is_valid():
        qs = form.filter(qs)
    page = keyset_page(qs, cursor=request.GET.get("after"), size=PAGE_SIZE, time_field="created_at", pk_field="id")
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
