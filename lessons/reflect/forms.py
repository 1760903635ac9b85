from __future__ import annotations

from django import forms


class RepositoryForm(forms.Form):
    repo_path = forms.CharField(label="Repository (absolute path on the server)", max_length=1000)
    bootstrap_dir = forms.CharField(
        label="Bootstrap folder (relative)", max_length=300, required=False, initial=".aioson/context/bootstrap"
    )
    human_gate = forms.BooleanField(label="Human gate: doc rewrites wait for a reviewer", required=False)


class RejectForm(forms.Form):
    reason = forms.CharField(label="Reason", max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
