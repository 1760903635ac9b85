"""JSON API of the review pass: run it on a summary, and read a memory target's rendered snapshot."""

from __future__ import annotations

import math
from contextlib import ExitStack
from typing import Annotated, Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from pydantic import Field

from lessonboard import breaker
from lessonboard.api import ApiError, Described, api_view, check_workspace, json_body, workspace_for
from lessonboard.llm import limiter, ratelimit
from lessonboard.models import TokenScope, Workspace
from lessonboard.schemas import (
    AgentName,
    QueryModel,
    RequestModel,
    ResponseModel,
    WorkspaceSlug,
    validated,
)
from lessons.review import memory
from lessons.review.models import Proposal, ProposalStatus
from lessons.review.staging import run_review

BUCKETS = ("applied", "rejected", "failed", "pending")


class ReviewBody(RequestModel):
    summary: Annotated[str, Field(max_length=settings.REVIEW_SUMMARY_MAX)] | None = None
    workspace: WorkspaceSlug
    agent: AgentName | None = None


class MemoryQuery(QueryModel):
    workspace: WorkspaceSlug


class ProposalOutcome(ResponseModel):
    id: int
    proposal: dict[str, Any]
    reason: str
    gate: str


class ReviewOut(ResponseModel):
    run: int
    workspace: str
    applied: list[ProposalOutcome]
    rejected: list[ProposalOutcome]
    failed: list[ProposalOutcome]
    pending: list[ProposalOutcome]
    error: str | None = Field(None, description="502: the model or the gate failed; what was applied before stays")
    stage: str | None = None


class MemorySnapshot(ResponseModel):
    workspace: str
    target: str
    snapshot: str
    entries: list[str]
    entry_count: int
    used_chars: int
    char_limit: int
    usage: str


def workspace_slug(value: str) -> str:
    """``value`` if it is a workspace slug, else ``ApiError`` naming ``workspace`` (the MCP tools too)."""
    return validated(MemoryQuery, {"workspace": value}).workspace


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


def _saturated(slug: str, *, run: int | None = None, error: str = "") -> JsonResponse:
    """Every LLM slot of this node (or this web process's share of its threads) is in use: answered at
    once, nothing waits in the web process."""
    body: dict[str, Any] = {
        "error": error or "every LLM call slot of this node is in use; try again shortly",
        "workspace": slug,
    }
    if run is not None:
        body["run"] = run
    response = JsonResponse(body, status=503)
    response["Retry-After"] = str(limiter.RETRY_AFTER)
    return response


@api_view(
    TokenScope.FULL,
    methods=("POST",),
    describe=Described(
        "Run the review pass on a summary: gated memory writes",
        body=(ReviewBody,),
        responses={200: ReviewOut, 502: ReviewOut},
        error_text={
            503: "Nothing was run, or the run stopped: the LLM is unreachable, rate-limited, or every LLM call slot "
            "of this node is in use, or half this web process's threads already wait on the LLM (the web never waits "
            "for one); `Retry-After` says when to try again"
        },
    ),
)
def reviews(request: HttpRequest) -> JsonResponse:
    """``POST /api/v1/reviews`` ``{summary, workspace, agent}`` → the four buckets with their reasons."""
    asked = validated(
        ReviewBody,
        json_body(request, max_bytes=settings.REVIEW_SUMMARY_MAX * 4 + 4096, setting="LESSONBOARD_REVIEW_SUMMARY_MAX"),
    )
    summary, slug, agent = asked.summary or "", asked.workspace, asked.agent or ""
    workspace = workspace_for(request.agent_token, slug)  # type: ignore[attr-defined]
    outage = breaker.outage()
    if outage is not None:
        # The LLM is down for everyone (docs/operations.md#llm-outage): nothing was tried, try again later.
        response = JsonResponse({"error": outage.text, "workspace": slug}, status=503)
        response["Retry-After"] = str(max(int(settings.LLM_BREAKER_PROBE_INTERVAL), 1))
        return response
    pause = ratelimit.current()
    if pause is not None:
        # The provider's rate limit pauses every call (docs/operations.md#llm-rate-limit): nothing was tried.
        response = JsonResponse({"error": pause.text, "workspace": slug}, status=503)
        response["Retry-After"] = str(max(math.ceil(pause.seconds()), 1))
        return response
    if limiter.saturated(settings.LLM_MODEL):
        return _saturated(slug)
    with ExitStack() as stack:
        try:
            # The web never waits for a slot, and keeps half its threads free (docs/api.md#reviews-when-busy).
            guard = stack.enter_context(limiter.web_call())
        except limiter.WebShareFull as exc:
            return _saturated(slug, error=exc.message)
        result = run_review(workspace, summary, agent=agent, token=request.agent_token)  # type: ignore[attr-defined]
    if guard.refused:
        return _saturated(slug, run=result.run.pk)
    rows = list(result.run.proposals.order_by("position"))
    body: dict[str, Any] = {"run": result.run.pk, "workspace": slug, **outcome_payload(rows)}
    pause = ratelimit.current() if result.error is not None else None
    if pause is not None:
        # The proposer met a rate limit: not the caller's fault, and worth trying again after the pause.
        body.update(error=result.error.message, stage=result.error.stage)  # type: ignore[union-attr]
        response = JsonResponse(body, status=503)
        response["Retry-After"] = str(max(math.ceil(pause.seconds()), 1))
        return response
    if result.error is not None:
        # The model (or gate) failed, not the caller: 502, with what was applied before the failure.
        body.update(error=result.error.message, stage=result.error.stage)
        return JsonResponse(body, status=502)
    return JsonResponse(body)


@api_view(
    TokenScope.FULL,
    methods=("GET",),
    describe=Described(
        "A memory target's rendered snapshot (memory or user)",
        query=MemoryQuery,
        responses={200: MemorySnapshot},
        path={"target": {"type": "string", "enum": list(memory.TARGETS)}},
    ),
)
def memory_snapshot(request: HttpRequest, target: str) -> JsonResponse:
    """``GET /api/v1/memory/<target>?workspace=`` → hermes' rendered block for the agent's prompt."""
    if target not in memory.TARGETS:
        raise ApiError(f"Invalid target '{target}'. Use 'memory' or 'user'.", status=404, field="target")
    slug = validated(MemoryQuery, request.GET.dict()).workspace
    check_workspace(request.agent_token, slug)  # type: ignore[attr-defined]
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
