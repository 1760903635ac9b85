"""Forms of the triage pages: the queue filter (kept in the URL) and the bulk action request."""

from __future__ import annotations

from typing import Any

from django import forms

from lessonq.jobid import is_job_id
from lessonq.models import Trigger
from lessonq.triage.models import BulkKind
from lessonq.triage.queries import AGES, DEFAULT_TAB, SORTS, TABS, JobFilter
from lessons.forms import form_tags

AGE_CHOICES = [("", "any"), *((k, k) for k in AGES)]


class JobFilterForm(forms.Form):
    tab = forms.ChoiceField(choices=[(t.slug, t.label) for t in TABS.values()], required=False)
    q = forms.CharField(required=False, max_length=200, label="Search task and error")
    trigger = forms.ChoiceField(choices=[("", "any"), *Trigger.choices], required=False)
    agent = forms.CharField(required=False, max_length=200)
    workspace = forms.CharField(required=False, max_length=200)
    group = forms.RegexField(regex=r"^[0-9a-f]{16}$", required=False, label="Error group")
    newer = forms.ChoiceField(choices=AGE_CHOICES, required=False, label="Newer than")
    older = forms.ChoiceField(choices=AGE_CHOICES, required=False, label="Older than")
    died = forms.ChoiceField(choices=AGE_CHOICES, required=False, label="Finished within")
    sort = forms.ChoiceField(choices=list(SORTS.items()), required=False)

    def job_filter(self) -> JobFilter:
        """The valid part of the filter (an invalid field is dropped and reported by the form)."""
        data: dict[str, Any] = self.cleaned_data if self.is_bound and self.is_valid() else {}
        if self.is_bound and not self.is_valid():
            data = {k: v for k, v in self.cleaned_data.items() if k not in self.errors}
        values = {name: (data.get(name) or "").strip() for name in JobFilter.__dataclass_fields__}
        values["tab"] = values["tab"] or DEFAULT_TAB
        values["sort"] = values["sort"] or "newest"
        return JobFilter(**values)


class BulkForm(JobFilterForm):
    """A bulk action: ``kind`` over the checked ``ids`` (scope "selection") or over everything matching
    the filter fields (scope "filter")."""

    kind = forms.ChoiceField(choices=BulkKind.choices)
    scope = forms.ChoiceField(choices=[("selection", "selection"), ("filter", "filter")])

    def __init__(self, data: Any = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(data, *args, **kwargs)
        self.ids: list[str] = []
        if data is not None and hasattr(data, "getlist"):
            self.ids = [i.strip().lower() for i in data.getlist("ids") if i.strip()]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        bad = [i for i in self.ids if not is_job_id(i)]
        if bad:
            raise forms.ValidationError(f"invalid job id {bad[0]!r}: a job id is 16 hex characters")
        if cleaned.get("scope") == "selection" and not self.ids:
            raise forms.ValidationError("Select at least one job, or act on everything matching the filter.")
        return cleaned


class LessonDraftForm(forms.Form):
    """A lesson drawn from a dead job or an error group, as a person edits it before it is proposed."""

    situation = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 3}))
    mistake = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 4}))
    correction = forms.CharField(
        max_length=2000, widget=forms.Textarea(attrs={"rows": 3}), help_text="what an agent should do instead"
    )
    tags = forms.CharField(required=False, max_length=500, help_text="comma-separated")

    def clean_tags(self) -> list[str]:
        return form_tags(self.cleaned_data["tags"], most=20)
