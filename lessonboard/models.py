"""The project-wide concepts every app shares: agent tokens, workspaces, the audit log, worker beats."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

SLUG_RE = r"^[a-z0-9][a-z0-9._-]{0,99}$"


class SitePermission(models.Model):
    """Holds the permissions that belong to no single model (a Django idiom: an unmanaged model).

    Roles (groups) are granted these in ``lessonboard/roles.py``; every view and action checks one.
    """

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_dashboard", "Can see the dashboard pages"),
            ("operate_queue", "Can retry, purge and bulk-act on queue jobs"),
            ("review_memory", "Can approve or reject gated memory writes"),
            ("manage_tokens", "Can create and revoke agent API tokens"),
        ]

    def __str__(self) -> str:
        return "site permission"


class TokenScope(models.TextChoices):
    INGEST = "ingest", "ingest: send Reflexion triggers only"
    FULL = "full", "full: every API endpoint"


class AgentTokenQuerySet(models.QuerySet["AgentToken"]):
    def active(self) -> AgentTokenQuerySet:
        return self.filter(revoked_at__isnull=True)


class AgentToken(models.Model):
    """An agent's API credential. Only a SHA-256 of the token is stored; see ``lessonboard/tokens.py``."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, help_text="Public part of the token, shown in lists.")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=list, help_text='Scopes granted, e.g. ["ingest"] or ["full"].')
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = AgentTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def has_scope(self, scope: str) -> bool:
        return TokenScope.FULL in self.scopes or scope in self.scopes

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])
        from lessonboard.tokens import forget

        forget(self)

    def touch(self) -> None:
        """Record use, at most once per ``API_TOKEN_TOUCH_INTERVAL`` so busy agents cost no write each."""
        now = timezone.now()
        last = self.last_used_at
        if last is None or (now - last).total_seconds() >= settings.API_TOKEN_TOUCH_INTERVAL:
            AgentToken.objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now


class WorkspaceQuerySet(models.QuerySet["Workspace"]):
    def for_slug(self, slug: str) -> Workspace:
        """The workspace an agent names, created on first sight."""
        workspace, _ = self.get_or_create(slug=slug, defaults={"name": slug})
        return workspace


class Workspace(models.Model):
    """A project an agent works in; the API's ``workspace`` field carries its slug."""

    slug = models.CharField(
        max_length=100,
        unique=True,
        validators=[RegexValidator(SLUG_RE, "Use lower-case letters, digits, '.', '_' or '-'.")],
    )
    name = models.CharField(max_length=200, blank=True)
    repo_path = models.CharField(
        max_length=1000, blank=True, help_text="Git work tree on the server host, for doc reflection."
    )
    reflect_bootstrap_dir = models.CharField(
        max_length=300,
        default=".aioson/context/bootstrap",
        help_text="Bootstrap docs folder, relative to the repository (AIOSON's default).",
    )
    reflect_human_gate = models.BooleanField(
        default=False, help_text="Doc rewrites wait for a reviewer's approval instead of being written at once."
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = WorkspaceQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class AuditEvent(models.Model):
    """Who (a user or an agent token) did what to which objects, when, from which filter, with what result."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_token = models.ForeignKey(AgentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=100, db_index=True)
    object_type = models.CharField(max_length=100, blank=True)
    object_ids = models.JSONField(default=list, blank=True)
    filter = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["object_type", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action}"

    @property
    def actor(self) -> str:
        if self.actor_user_id:
            return str(self.actor_user)
        if self.actor_token_id:
            return f"token:{self.actor_token}"
        return "system"

    @classmethod
    def record(
        cls,
        action: str,
        *,
        user: Any = None,
        token: AgentToken | None = None,
        object_type: str = "",
        object_ids: list[Any] | None = None,
        filter: dict[str, Any] | None = None,
        result: dict[str, Any] | None = None,
        reason: str = "",
    ) -> AuditEvent:
        return cls.objects.create(
            action=action,
            actor_user=user if user is not None and getattr(user, "is_authenticated", False) else None,
            actor_token=token,
            object_type=object_type,
            object_ids=[str(i) for i in (object_ids or [])],
            filter=filter or {},
            result=result or {},
            reason=reason,
        )


class WorkerHeartbeat(models.Model):
    """The last time each Celery worker answered; written by the ``heartbeat`` task."""

    hostname = models.CharField(max_length=255, unique=True)
    node = models.CharField(max_length=100)
    last_seen = models.DateTimeField(default=timezone.now)
    beats = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname
