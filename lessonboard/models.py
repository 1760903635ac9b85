"""The project-wide concepts every app shares: agent tokens, workspaces, the audit log, worker beats."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Func
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Left
from django.utils import timezone

# \Z, not $: "$" also matches before a trailing newline, which would let "proj\n" through.
SLUG_RE = r"^[a-z0-9][a-z0-9._-]{0,99}\Z"


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
    METRICS = "metrics", "metrics: read /metrics only (Prometheus)"
    OPERATOR = "operator", "operator: the operator's actions (DLQ list, retry, purge, bulk, pause/resume)"


class AgentTokenQuerySet(models.QuerySet["AgentToken"]):
    def active(self) -> AgentTokenQuerySet:
        return self.filter(revoked_at__isnull=True)


def offline_cache_key(token_hash: str) -> str:
    """The cache key of a token's offline copy (``lessonboard.tokens``, docs/security.md)."""
    return f"lessonboard:agent-token:{token_hash}"


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
    workspaces = models.JSONField(
        default=list,
        blank=True,
        help_text='Workspace slugs this token may name, e.g. ["proj-a"]; empty: any workspace.',
    )
    may_create_workspaces = models.BooleanField(
        default=False,
        help_text="An ingest token may create a workspace by naming a new one (full tokens always may).",
    )

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

    def clean(self) -> None:
        """The admin form's check: known scopes, a list of workspace slugs."""
        errors = {}
        if not isinstance(self.scopes, list) or not set(self.scopes) <= set(TokenScope.values):
            errors["scopes"] = f"a list of scopes from: {', '.join(TokenScope.values)}"
        if not isinstance(self.workspaces, list) or not all(
            isinstance(slug, str) and re.match(SLUG_RE, slug) for slug in self.workspaces
        ):
            errors["workspaces"] = 'a list of workspace slugs, e.g. ["proj-a"]; [] for any workspace'
        if errors:
            raise ValidationError(errors)

    def may_name(self, slug: str) -> bool:
        """Whether this token may name workspace ``slug`` at all (a bound token: only its own)."""
        return not self.workspaces or slug in self.workspaces

    def may_create(self, slug: str) -> bool:
        return self.may_name(slug) and (TokenScope.FULL in self.scopes or self.may_create_workspaces)

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])
        cache.delete(offline_cache_key(self.token_hash))  # the offline copy too, even of a token revoked before

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


AUDIT_PREVIEW_CHARS = 300


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def for_list(self) -> AuditEventQuerySet:
        """What the audit list shows: the ids, filter, result and reason as text cut in SQL (a bulk
        action over 10,000 jobs records 10,000 ids; the list never loads them)."""
        cut = AUDIT_PREVIEW_CHARS
        return self.defer("object_ids", "filter", "result", "reason").annotate(
            ids_preview=Left(Cast("object_ids", models.TextField()), cut),
            ids_count=Func("object_ids", function="jsonb_array_length", output_field=models.IntegerField()),
            # The first 20 ids as a JSON array, for the links (never the whole list).
            ids_head=RawSQL(
                "(SELECT coalesce(jsonb_agg(x), '[]'::jsonb) FROM"
                " (SELECT x FROM jsonb_array_elements(lessonboard_auditevent.object_ids) AS x LIMIT 20) AS head)",
                [],
                output_field=models.JSONField(),
            ),
            filter_preview=Left(Cast("filter", models.TextField()), cut),
            result_preview=Left(Cast("result", models.TextField()), cut),
            reason_preview=Left("reason", cut),
        )


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

    objects = AuditEventQuerySet.as_manager()

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


class BreakerState(models.TextChoices):
    CLOSED = "closed", "closed (calls go through)"
    OPEN = "open", "open (LLM unreachable: work waits)"
    HALF_OPEN = "half_open", "half-open (one probe in flight)"


class LLMBreaker(models.Model):
    """The LLM circuit breaker, one row per endpoint, shared by every web and worker process.

    ``failures`` counts consecutive outage errors (connection errors, timeouts, 5xx); at
    LLM_BREAKER_THRESHOLD the breaker opens and work that needs the LLM waits instead of spending
    attempts. A probe (``lessonboard.breaker.probe``, run by beat) closes it again (docs/operations.md).
    """

    endpoint = models.CharField(primary_key=True, max_length=500, help_text="LESSONBOARD_LLM_BASE_URL")
    state = models.CharField(max_length=20, choices=BreakerState.choices, default=BreakerState.CLOSED)
    failures = models.PositiveIntegerField(default=0, help_text="consecutive outage errors")
    opened_at = models.DateTimeField(null=True, blank=True, help_text="unreachable since")
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    probe_at = models.DateTimeField(null=True, blank=True, help_text="next half-open probe is due")
    probes = models.PositiveIntegerField(default=0, help_text="probes since the breaker opened")
    trips = models.PositiveIntegerField(default=0, help_text="times the breaker opened")
    closed_at = models.DateTimeField(null=True, blank=True, help_text="last recovery")
    # The provider's rate limit (lessonboard.llm.ratelimit): while ``paused_until`` is ahead no call is
    # made; ``rate_limits`` counts consecutive 429s (the backoff when none names a wait), reset by an answer.
    paused_until = models.DateTimeField(null=True, blank=True, help_text="no call before this (rate limit)")
    rate_limits = models.PositiveIntegerField(default=0, db_default=0, help_text="consecutive rate-limit answers")
    rate_limit_hits = models.PositiveIntegerField(default=0, db_default=0, help_text="rate-limit answers in all")
    rate_limited_since = models.DateTimeField(null=True, blank=True)
    last_rate_limit = models.TextField(blank=True, default="", db_default="")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(state__in=BreakerState.values), name="llm_breaker_state_valid")
        ]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.state}"


class DerivedState(models.Model):
    """A derived view kept ready to read (docs/api.md#limits): knowledge-gap groups, the inbox's waiting
    items. Written by a beat task (``console.tasks.refresh_derived``) and when an input changes
    (an action, the embed worker); a page reads its row by primary key and never recomputes it."""

    name = models.CharField(primary_key=True, max_length=100)
    data = models.JSONField(default=dict)
    computed_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name} at {self.computed_at:%Y-%m-%d %H:%M:%S}"

    @classmethod
    def read(cls, name: str) -> Any:
        """The stored data, or ``None`` before the first refresh."""
        row = cls.objects.filter(pk=name).values_list("data", flat=True).first()
        return row

    @classmethod
    def write(cls, name: str, data: Any) -> None:
        cls.objects.update_or_create(pk=name, defaults={"data": data, "computed_at": timezone.now()})


class QueuePause(models.Model):
    """A queue an operator paused (``lessonboard.pauses``): a row while it is paused, so a pause survives a
    restart of every process; its jobs wait without spending attempts until it is resumed."""

    name = models.CharField(primary_key=True, max_length=50)
    paused_at = models.DateTimeField(default=timezone.now)
    paused_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    paused_by_token = models.ForeignKey(AgentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reason = models.CharField(max_length=300, blank=True)

    def __str__(self) -> str:
        return f"{self.name} paused"


class ScheduleRun(models.Model):
    """The last run of one periodic (beat) task, as the worker that ran it saw it (``lessonboard.schedules``)."""

    task = models.CharField(primary_key=True, max_length=200)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    ok = models.BooleanField(default=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    runs = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return self.task


class LLMCall(models.Model):
    """One chat call through the gateway (``lessonboard.llm.usage``): what it was for, the model, tokens
    (from the answer's ``usage``, else estimated and marked so), latency, outcome and cost (from
    LESSONBOARD_LLM_PRICES). Kept LESSONBOARD_LLM_CALL_RETENTION, like the other logs."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    purpose = models.CharField(max_length=20, help_text="lesson, review, refine, hyde, probe or other")
    model = models.CharField(max_length=200)
    endpoint = models.CharField(max_length=500, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    tokens_estimated = models.BooleanField(default=False, help_text="the answer had no usage: tokens are chars / 4")
    latency_ms = models.FloatField(default=0.0)
    outcome = models.CharField(max_length=20, help_text="ok, truncated, rate_limited, refused, error")
    error = models.TextField(blank=True)
    cost = models.DecimalField(max_digits=14, decimal_places=8, default=0)
    workspace = models.CharField(max_length=100, blank=True, db_index=True)
    agent = models.CharField(max_length=200, blank=True)
    prompt_name = models.CharField(max_length=100, blank=True)
    prompt_version = models.CharField(max_length=100, blank=True)
    job_id = models.CharField(max_length=16, blank=True, db_index=True)
    refine_run_id = models.BigIntegerField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.purpose} {self.model} {self.outcome}"


class QueueDepthSample(models.Model):
    """The lesson queue's depth (jobs waiting or running), sampled every minute by beat
    (``lessonq.tasks.sample_queue_depth``): the Overview's depth chart shows each bucket's peak."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    depth = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"{self.depth} at {self.at:%Y-%m-%d %H:%M}"
