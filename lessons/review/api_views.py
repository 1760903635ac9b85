"""JSON API of the review pass: run it on a summary, and read a memory target's rendered snapshot."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import HttpRequest, JsonResponse

from lessonboard.api import ApiError, api_view, json_body, require_str
from lessonboard.models import SLUG_RE, TokenScope, Workspace
from lessons.review import memory
from lessons.review.models import Proposal, ProposalStatus
from lessons.review.staging import run_review

BUCKETS = ("applied", "rejected", "failed", "pending")


def _workspace_slug(value: str) -> str:
    from django.core.validators import RegexValidator

    try:
        RegexValidator(SLUG_RE)(value)
    except ValidationError as exc:
        raise ApiError(
            "'workspace' must be a slug: lower-case letters, digits, '.', '_' or '-'", field="workspace"
        ) from exc
    return value


def outcome_payload(proposals: list[Proposal]) -> dict[str, list[dict[str, Any]]]:
    buckets: dict[str, list[dict[str, Any]]] = {name: [] for name in BUCKETS}
    for row in proposals:
        store_said = row.status in (ProposalStatus.APPLIED, ProposalStatus.FAILED)
        buckets[row.status].append(
            {
                "id": row.pk,
                "proposal": row.as_payload(),
                "reason": row.message if store_said else row.gate_reason,
                "gate": row.gate,
            }
        )
    return buckets


@api_view(TokenScope.FULL, methods=("POST",))
def reviews(request: HttpRequest) -> JsonResponse:
    """``POST /api/v1/reviews`` ``{summary, workspace, agent}`` → the four buckets with their reasons."""
    data = json_body(request, max_bytes=settings.REVIEW_SUMMARY_MAX * 4 + 4096)
    summary = require_str(data, "summary", required=False, max_length=settings.REVIEW_SUMMARY_MAX)
    slug = _workspace_slug(require_str(data, "workspace", max_length=100))
    agent = require_str(data, "agent", required=False, max_length=200)
    workspace = Workspace.objects.for_slug(slug)
    result = run_review(workspace, summary, agent=agent, token=request.agent_token)  # type: ignore[attr-defined]
    rows = list(result.run.proposals.order_by("position"))
    body: dict[str, Any] = {"run": result.run.pk, "workspace": slug, **outcome_payload(rows)}
    if result.error is not None:
        # The model (or gate) failed, not the caller: 502, with what was applied before the failure.
        body.update(error=result.error.message, stage=result.error.stage)
        return JsonResponse(body, status=502)
    return JsonResponse(body)


@api_view(TokenScope.FULL, methods=("GET",))
def memory_snapshot(request: HttpRequest, target: str) -> JsonResponse:
    """``GET /api/v1/memory/<target>?workspace=`` → hermes' rendered block for the agent's prompt."""
    if target not in memory.TARGETS:
        raise ApiError(f"Invalid target '{target}'. Use 'memory' or 'user'.", status=404, field="target")
    slug = request.GET.get("workspace", "")
    if not slug:
        raise ApiError("'workspace' is required", field="workspace")
    _workspace_slug(slug)
    workspace = Workspace.objects.filter(slug=slug).first()
    entries = memory.entries_of(workspace, target) if workspace else []
    limit = memory.limit_for(target)
    return JsonResponse(
        {
            "workspace": slug,
            "target": target,
            "snapshot": memory.render_block(target, entries, limit),
            "entries": entries,
            "entry_count": len(entries),
            "used_chars": memory.char_count(entries),
            "char_limit": limit,
            "usage": memory.usage_text(entries, limit),
        }
    )
