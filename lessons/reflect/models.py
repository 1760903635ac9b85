"""Rows of doc reflection: manifests prepared, events emitted, and doc rewrites awaiting a reviewer.

Registered through one import at the end of ``lessons/models.py`` (app label ``lessons``).
"""

from __future__ import annotations

import difflib
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from lessonboard.models import AgentToken, Workspace

__all__ = [
    "DocProposal",
    "DocProposalStatus",
    "ReflectEvent",
    "ReflectEventType",
    "ReflectManifest",
    "ReflectManifestStatus",
]


def jsonb_safe(value: Any) -> Any:
    """``value`` with U+0000 replaced by U+FFFD in every string: PostgreSQL's jsonb cannot hold it, and a
    repository's files (or an agent) may contain one."""
    if isinstance(value, str):
        return value.replace("\0", "\ufffd")
    if isinstance(value, dict):
        return {jsonb_safe(k): jsonb_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonb_safe(v) for v in value]
    return value


class ReflectManifestStatus(models.TextChoices):
    PENDING = "pending", "pending"
    CONSUMED = "consumed", "consumed by a commit"
    SUPERSEDED = "superseded", "superseded by a newer prepare"


class ReflectManifestQuerySet(models.QuerySet["ReflectManifest"]):
    def pending(self) -> ReflectManifestQuerySet:
        return self.filter(status=ReflectManifestStatus.PENDING)


class ReflectManifest(models.Model):
    """A manifest prepare wrote to ``.aioson/runtime/reflect-prompt.json``; ``data`` is it, verbatim.

    The file in the repository stays the source of truth for commit (an agent reads and AIOSON's own CLI
    may write it); this row is the record the pages and the approval queue show.
    """

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="reflect_manifests")
    session_id = models.CharField(max_length=300)
    trigger_agent = models.CharField(max_length=200, blank=True)
    git_range = models.CharField(max_length=300)
    verdict = models.CharField(max_length=20)
    forced = models.BooleanField(default=False)
    targets = models.JSONField(default=list)
    snapshot_hash = models.CharField(max_length=64)
    data = models.JSONField()
    status = models.CharField(
        max_length=20, choices=ReflectManifestStatus.choices, default=ReflectManifestStatus.PENDING
    )
    created_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)

    objects = ReflectManifestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["workspace", "status"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=ReflectManifestStatus.values), name="reflect_manifest_status_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workspace} {self.session_id} ({self.status})"

    def close(self, status: str) -> None:
        self.status = status
        self.closed_at = timezone.now()
        self.save(update_fields=["status", "closed_at"])


class ReflectEventType(models.TextChoices):
    PREPARED = "memory_reflect_prepared", "prepared"
    SKIPPED = "memory_reflect_skipped", "skipped"
    FAILED = "memory_reflect_failed", "failed"
    DRY_RUN = "memory_reflect_dry_run", "dry run"
    COMMITTED = "memory_reflect_committed", "committed"
    # Ours, for the human gate (AIOSON has no gate).
    PROPOSED = "memory_reflect_proposed", "proposed for review"
    REJECTED = "memory_reflect_rejected", "rejected by a reviewer"


class ReflectEvent(models.Model):
    """AIOSON's ``agent_events`` row: type, message and JSON payload, always with the intended type."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="reflect_events")
    event_type = models.CharField(max_length=50, choices=ReflectEventType.choices, db_index=True)
    message = models.TextField(blank=True)
    payload = models.JSONField(default=dict, blank=True)
    agent = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["workspace", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.workspace} {self.event_type}"

    @classmethod
    def record(
        cls, workspace: Workspace, event_type: str, message: str, payload: dict[str, Any], *, agent: str = ""
    ) -> ReflectEvent:
        from lessons.reflect.metrics import REFLECT_EVENTS

        REFLECT_EVENTS.labels(event=str(event_type)).inc()
        return cls.objects.create(
            workspace=workspace,
            event_type=event_type,
            message=jsonb_safe(message),
            payload=jsonb_safe(payload),
            agent=jsonb_safe(agent),
        )


class DocProposalStatus(models.TextChoices):
    PENDING = "pending", "pending review"
    APPLIED = "applied", "approved and written"
    REJECTED = "rejected", "rejected"
    STALE = "stale", "stale (bootstrap or manifest changed)"
    FAILED = "failed", "approved but failed"


class DocProposalQuerySet(models.QuerySet["DocProposal"]):
    def pending(self) -> DocProposalQuerySet:
        return self.filter(status=DocProposalStatus.PENDING)

    def counts_by_agent(self) -> list[dict[str, Any]]:
        """Per proposing agent, how many proposals ended in each status: noisy proposers show up here
        (most rejected proposals are the ones nobody measures, as users of NousResearch/hermes-agent report)."""
        rows: dict[str, dict[str, Any]] = {}
        for agent, status, n in self.values_list("agent", "status").annotate(n=models.Count("id")).order_by():
            row = rows.setdefault(agent, {"agent": agent, **dict.fromkeys(DocProposalStatus.values, 0)})
            row[status] = n
        return sorted(rows.values(), key=lambda r: r["agent"])

    def rejections_by_target(self) -> list[tuple[str, int]]:
        """How often each bootstrap file was in a rejected proposal, most rejected first."""
        counts: dict[str, int] = {}
        for files in self.filter(status=DocProposalStatus.REJECTED).values_list("files", flat=True):
            for path in files:
                name = path.replace("\\", "/").rsplit("/", 1)[-1]
                counts[name] = counts.get(name, 0) + 1
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


class DocProposal(models.Model):
    """A validated doc rewrite held for a reviewer (the workspace's human gate is on).

    ``files`` is exactly what the agent sent (validated raw, sanitised when written); ``manifest`` is the
    manifest it was validated against, so approval re-runs every check against the disk of that moment.
    """

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="doc_proposals")
    manifest_record = models.ForeignKey(
        ReflectManifest, null=True, blank=True, on_delete=models.SET_NULL, related_name="proposals"
    )
    manifest = models.JSONField()
    files = models.JSONField()
    validation = models.JSONField(default=dict)
    snapshot_hash = models.CharField(max_length=64, blank=True)
    agent = models.CharField(max_length=200, blank=True)
    proposed_by_token = models.ForeignKey(
        AgentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=20, choices=DocProposalStatus.choices, default=DocProposalStatus.PENDING)
    created_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    error = models.TextField(blank=True)

    objects = DocProposalQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "-created_at"])]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=DocProposalStatus.values), name="doc_proposal_status_valid")
        ]

    def __str__(self) -> str:
        return f"doc proposal #{self.pk} for {self.workspace} ({self.status})"

    @property
    def is_pending(self) -> bool:
        return self.status == DocProposalStatus.PENDING

    @property
    def reasons(self) -> list[str]:
        return list(self.manifest.get("heuristic_reasons") or [])

    @property
    def changed_files(self) -> list[str]:
        return list(self.manifest.get("changed_files") or [])

    def diffs(self, current: dict[str, str]) -> list[dict[str, Any]]:
        """Per file, a unified diff of ``current`` (name → text now on disk) against the proposed text."""
        out = []
        for path, content in self.files.items():
            name = path.replace("\\", "/").rsplit("/", 1)[-1]
            before = current.get(name, "")
            lines = list(
                difflib.unified_diff(
                    before.splitlines(keepends=True),
                    str(content).splitlines(keepends=True),
                    fromfile=f"a/{path}",
                    tofile=f"b/{path}",
                )
            )
            out.append({"path": path, "lines": [line.rstrip("\n") for line in lines]})
        return out

    def decide(self, status: str, *, user: Any = None, reason: str = "", error: str = "") -> None:
        self.status = status
        self.decided_by = user if user is not None and getattr(user, "is_authenticated", False) else None
        self.decided_at = timezone.now()
        self.reason = reason
        self.error = error
        self.save(update_fields=["status", "decided_by", "decided_at", "reason", "error"])
