from __future__ import annotations

from typing import Any

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from lessonboard.login import unlock
from lessonboard.models import AgentToken, AuditEvent, TokenScope, WorkerHeartbeat, Workspace
from lessonboard.tokens import issue_token

admin.site.site_header = "lessonboard administration"
admin.site.site_title = "lessonboard admin"


# --- every admin write is on /audit/ too ------------------------------------------------------------------
# Django's admin keeps its own LogEntry for each add, change and delete (single or bulk), through these
# ModelAdmin methods; each one now also records an AuditEvent (``admin.add``/``admin.change``/
# ``admin.delete``, the model as object_type, the change message as result), so no admin write — a token's
# scopes edited, a lesson or a workspace deleted — is missing from the audit log. Patched on the base
# class, so every app's admin (and any added later) is covered; tests/lessonboard/test_audit_walk.py checks.
def _audited(verb: str, objects: Any, request: HttpRequest, message: Any = "") -> None:
    items = list(objects)
    if not items:
        return
    meta = items[0]._meta
    AuditEvent.record(
        f"admin.{verb}",
        user=request.user,
        object_type=f"{meta.app_label}.{meta.model_name}",
        object_ids=[obj.pk for obj in items],
        result={"change": message} if message else {"repr": [str(obj)[:200] for obj in items[:20]]},
    )


_log_addition = admin.ModelAdmin.log_addition
_log_change = admin.ModelAdmin.log_change
_log_deletions = admin.ModelAdmin.log_deletions


def _log_addition_audited(self: admin.ModelAdmin[Any], request: HttpRequest, obj: Any, message: Any) -> Any:
    entry = _log_addition(self, request, obj, message)
    _audited("add", [obj], request, message)
    return entry


def _log_change_audited(self: admin.ModelAdmin[Any], request: HttpRequest, obj: Any, message: Any) -> Any:
    entry = _log_change(self, request, obj, message)
    _audited("change", [obj], request, message)
    return entry


def _log_deletions_audited(self: admin.ModelAdmin[Any], request: HttpRequest, queryset: Any) -> Any:
    entries = _log_deletions(self, request, queryset)
    _audited("delete", queryset, request)  # called before the rows go: their ids and names are kept
    return entries


admin.ModelAdmin.log_addition = _log_addition_audited  # type: ignore[method-assign]
admin.ModelAdmin.log_change = _log_change_audited  # type: ignore[method-assign]
admin.ModelAdmin.log_deletions = _log_deletions_audited  # type: ignore[method-assign]


class AgentTokenForm(forms.ModelForm):
    """Scopes as checkboxes (the model stores a JSON list; nobody should type ``["full"]``)."""

    scopes = forms.MultipleChoiceField(
        choices=TokenScope.choices,
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="Nothing ticked issues an ingest-only token.",
    )

    class Meta:
        model = AgentToken
        fields = ["name", "scopes", "workspaces", "may_create_workspaces"]


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    form = AgentTokenForm
    list_display = ["name", "prefix", "scopes", "workspaces", "created_by", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at", "created_at"]
    search_fields = ["name", "prefix"]
    readonly_fields = ["prefix", "created_by", "created_at", "last_used_at", "revoked_at"]
    fields = [
        "name",
        "scopes",
        "workspaces",
        "may_create_workspaces",
        "prefix",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: AgentToken, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        # A new token is issued by tokens.issue_token so only its hash is stored; the plaintext is
        # shown once, in the success message.
        issued = issue_token(
            obj.name,
            obj.scopes or ["ingest"],
            created_by=request.user,
            workspaces=obj.workspaces or [],
            may_create_workspaces=obj.may_create_workspaces,
        )
        obj.pk = issued.token.pk
        obj.refresh_from_db()
        AuditEvent.record("token.create", user=request.user, object_type="agent_token", object_ids=[obj.pk])
        messages.warning(request, f"Token for {obj.name} (copy it now, it is not shown again): {issued.plaintext}")

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        ids = []
        for token in queryset:
            token.revoke()
            ids.append(token.pk)
        AuditEvent.record("token.revoke", user=request.user, object_type="agent_token", object_ids=ids)
        self.message_user(request, f"Revoked {len(ids)} token(s).")


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "repo_path", "reflect_human_gate", "created_at"]
    search_fields = ["slug", "name", "repo_path"]


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor", "action", "object_type", "object_ids", "reason"]
    list_filter = ["action", "object_type", "created_at"]
    search_fields = ["action", "object_type", "reason", "actor_user__username", "actor_token__name"]
    date_hierarchy = "created_at"
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ["hostname", "node", "last_seen", "beats"]
    list_filter = ["node"]
    search_fields = ["hostname"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # written by the system; an Add form here could only crash or forge history


# django-axes' list of failed logins, with deletion (its way of unlocking) audited as an unlock.
admin.site.unregister(AccessAttempt)


@admin.register(AccessAttempt)
class AuditedAccessAttemptAdmin(AccessAttemptAdmin):
    actions = ["unlock_selected"]

    @admin.action(description="Unlock selected (forget their failed logins)")
    def unlock_selected(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        count = unlock(queryset, user=request.user)
        self.message_user(request, f"Unlocked {count} user/address pair(s).")

    def delete_model(self, request: HttpRequest, obj: AccessAttempt) -> None:
        unlock(AccessAttempt.objects.filter(pk=obj.pk), user=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        unlock(queryset, user=request.user)
