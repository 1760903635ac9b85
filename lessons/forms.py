from __future__ import annotations

from typing import Any

from django import forms

from lessonboard.models import SLUG_RE
from lessons.language import clean_code
from lessons.models import LessonStatus

TAG_MAX = 200  # a tag's characters: the lesson's tags column (and the API's Tags)


def split_tags(raw: str) -> list[str]:
    """``"Go, edit-file, ,go"`` → ``["go", "edit-file", "go"]`` (chatcli's tag normalisation, docs/compat/chatcli.md#lesson-parser)."""
    return [piece.strip().lower() for piece in raw.split(",") if piece.strip()]


def form_tags(raw: str, *, most: int | None = None) -> list[str]:
    """A form's comma-separated tags (``split_tags``; the first ``most`` of them), or a form error naming a
    tag longer than a lesson holds — a page saving it answered a 500 ("value too long")."""
    tags = split_tags(raw)[:most]
    for tag in tags:
        if len(tag) > TAG_MAX:
            raise forms.ValidationError(f"a tag has at most {TAG_MAX} characters: {tag[:40]}… has {len(tag)}")
    return tags


class SearchForm(forms.Form):
    q = forms.CharField(required=False, max_length=2000, label="Task or words")
    tags = forms.CharField(required=False, max_length=500, help_text="comma-separated; all must match")
    trigger = forms.CharField(required=False, max_length=50)
    workspace = forms.CharField(required=False, max_length=100)
    agent = forms.CharField(required=False, max_length=200)
    status = forms.ChoiceField(
        required=False,
        choices=[
            ("active", "active"),
            ("", "any but deleted"),
            ("archived", "archived"),
            ("superseded", "superseded"),
            ("deleted", "deleted (tombstones)"),
        ],
    )
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    similar = forms.IntegerField(required=False, widget=forms.HiddenInput)
    sort = forms.ChoiceField(
        required=False,
        choices=[
            ("newest", "newest"),
            ("most_useful", "most useful"),
            ("least_useful", "least useful"),
            ("most_served", "most served"),
            ("flagged", "flagged for review first"),
            ("most_repeated", "most repeated failure"),
            ("last_seen", "failure seen most recently"),
        ],
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "status" not in self.data:
            self.fields["status"].initial = LessonStatus.ACTIVE

    def clean_status(self) -> str:
        # Not in the URL: active, as the select shows (a bound form ignores ``initial``; without this the page
        # listed and searched archived and superseded lessons while showing "active").
        if "status" not in self.data:
            return LessonStatus.ACTIVE
        return str(self.cleaned_data["status"])


class ManualLessonForm(forms.Form):
    text = forms.CharField(max_length=20_000, widget=forms.Textarea(attrs={"rows": 3}), label="Lesson")
    workspace = forms.RegexField(
        regex=SLUG_RE,
        required=False,
        max_length=100,
        error_messages={"invalid": "Use lower-case letters, digits, '.', '_' or '-', starting with a letter or digit."},
    )


class LessonEditForm(forms.Form):
    situation = forms.CharField(max_length=20_000, widget=forms.Textarea(attrs={"rows": 2}))
    mistake = forms.CharField(required=False, max_length=20_000, widget=forms.Textarea(attrs={"rows": 2}))
    correction = forms.CharField(max_length=20_000, widget=forms.Textarea(attrs={"rows": 2}))
    tags = forms.CharField(required=False, max_length=2000, help_text="comma-separated")
    trigger = forms.CharField(required=False, max_length=50)
    confidence = forms.FloatField(min_value=0.0, max_value=1.0)
    lang = forms.CharField(
        required=False,
        max_length=8,
        label="Language",
        help_text="en, pt or another ISO 639-1 code; empty = detect from the text. Picks the full-text stemming.",
    )
    reason = forms.CharField(required=False, max_length=2000, help_text="why (kept in the history)")

    def clean_tags(self) -> list[str]:
        return form_tags(self.cleaned_data["tags"])

    def clean_lang(self) -> str:
        try:
            return clean_code(self.cleaned_data["lang"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc


class MergeForm(forms.Form):
    keep = forms.IntegerField(min_value=1, label="Keep lesson #")
    other = forms.IntegerField(min_value=1, label="Fold in lesson #")
    reason = forms.CharField(required=False, max_length=2000)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("keep") and data.get("keep") == data.get("other"):
            raise forms.ValidationError("pick two different lessons")
        return data
