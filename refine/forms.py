from __future__ import annotations

from django import forms

from lessonboard.models import Workspace
from lessons.forms import form_tags
from refine.models import RefineMode, RunStatus

YES_NO = [("", "any"), ("yes", "yes"), ("no", "no")]


class RunFilterForm(forms.Form):
    agent = forms.CharField(required=False, max_length=200)
    status = forms.ChoiceField(required=False, choices=[("", "any"), *RunStatus.choices])
    converged = forms.ChoiceField(required=False, choices=YES_NO)
    rolled_back = forms.ChoiceField(required=False, choices=YES_NO)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))


class ModeForm(forms.Form):
    agent = forms.CharField(max_length=200)
    # Modes are per workspace (an agent of the same name in another workspace has its own); empty: the
    # workspace-less pool's, for agents that name no workspace.
    workspace = forms.ModelChoiceField(
        queryset=Workspace.objects.order_by("slug"), to_field_name="slug", required=False, empty_label="(no workspace)"
    )
    mode = forms.ChoiceField(choices=RefineMode.choices)


class LessonProposalForm(forms.Form):
    situation = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    mistake = forms.CharField(max_length=4000, widget=forms.Textarea(attrs={"rows": 2}))
    correction = forms.CharField(max_length=8000, widget=forms.Textarea(attrs={"rows": 4}))
    tags = forms.CharField(required=False, max_length=500, help_text="comma-separated")

    def clean_tags(self) -> list[str]:
        return form_tags(self.cleaned_data["tags"])
