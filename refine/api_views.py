"""``POST /api/v1/refine``, ``GET /api/v1/refine/<id>`` and the per-agent mode endpoint."""

from __future__ import annotations

import threading
from typing import Annotated, Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import reverse
from pydantic import Field

from lessonboard.api import ApiError, ApiRequest, Described, api_view, json_body, named_workspace
from lessonboard.models import TokenScope
from lessonboard.schemas import AgentName, OptionalSlug, QueryModel, RequestModel, ResponseModel, Says, validated
from lessonboard.waiting import poll
from refine import runs
from refine.models import AgentRefineMode, RefineMode, RefineRun

MODE_ALIASES = {"next": RefineMode.ONCE.value, "clear": RefineMode.AUTO.value}

MAX_DRAFT_CHARS = 200_000
MAX_TASK_CHARS = 50_000
POLL_INTERVAL = 0.1
_waiters = threading.BoundedSemaphore(settings.REFINE_API_MAX_WAITERS)


class RefineBody(RequestModel):
    task: Annotated[str, Field(min_length=1, max_length=MAX_TASK_CHARS)]
    draft: Annotated[str, Field(min_length=1, max_length=MAX_DRAFT_CHARS)]
    agent: AgentName | None = None
    workspace: OptionalSlug | None = Field(None, description="required for a token bound to workspaces")
    max_passes: (
        Annotated[
            int,
            Field(ge=1, le=settings.REFINE_MAX_PASSES_LIMIT),
            Says(f"'max_passes' must be an integer between 1 and {settings.REFINE_MAX_PASSES_LIMIT}"),
        ]
        | None
    ) = None


class ModeQuery(QueryModel):
    agent: Annotated[str, Field(min_length=1, max_length=200)]
    workspace: OptionalSlug | None = Field(None, description="modes are per workspace; required for a bound token")


class ModeBody(RequestModel):
    agent: Annotated[AgentName, Field(min_length=1)]
    workspace: OptionalSlug | None = Field(None, description="modes are per workspace; required for a bound token")
    # Any case and surrounding spaces are forgiven (the view folds them), so the enum is what to send,
    # not all that is accepted.
    mode: Annotated[str, Field(min_length=1, max_length=10)] = Field(
        description="on, off, once, auto; chatcli's next (= once) and clear (= auto); any case",
        json_schema_extra={"enum": [*RefineMode.values, *MODE_ALIASES]},
    )


class Mode(ResponseModel):
    agent: str
    mode: str


class Tokens(ResponseModel):
    prompt: int
    completion: int


class PassOut(ResponseModel):
    number: int
    decision: str
    decided_by: str
    reason: str
    similarity_to_original: float
    degraded_from: str
    critique: list[Any]
    protocol_ok: bool
    latency_ms: float


class RefineRunOut(ResponseModel):
    id: int
    status: str
    outcome: str
    agent: str
    output: str | None = Field(description="null until the run is finished")
    output_pass: int | None
    converged: bool
    rolled_back: bool
    metadata: dict[str, str]
    reflexion_job: str | None
    skip_reason: str
    stop_reason: str
    error: str
    pass_count: int
    max_passes: int
    tokens: Tokens
    duration_ms: float | None
    passes: list[PassOut]
    poll_url: str
    page_url: str


def run_json(run: RefineRun, request: HttpRequest) -> dict[str, Any]:
    return {
        "id": run.pk,
        "status": run.status,
        "outcome": run.outcome,
        "agent": run.agent,
        "output": run.final_output if run.is_finished else None,
        "output_pass": run.output_pass,
        "converged": run.converged,
        "rolled_back": run.rolled_back,
        "metadata": run.metadata,
        "reflexion_job": run.reflexion_job or None,
        "skip_reason": run.skip_reason,
        "stop_reason": run.stop_reason,
        "error": run.error,
        "pass_count": run.pass_count,
        "max_passes": run.max_passes,
        "tokens": {"prompt": run.prompt_tokens, "completion": run.completion_tokens},
        "duration_ms": run.duration_ms,
        "passes": [
            {
                "number": p.number,
                "decision": p.decision,
                "decided_by": p.decided_by,
                "reason": p.reason,
                "similarity_to_original": p.similarity_to_original,
                "degraded_from": p.degraded_from,
                "critique": p.critique_bullets,
                "protocol_ok": p.protocol_ok,
                "latency_ms": p.latency_ms,
            }
            for p in run.passes.all()
        ],
        "poll_url": request.build_absolute_uri(reverse("refine:api-run", args=[run.pk])),
        "page_url": request.build_absolute_uri(reverse("refine:run", args=[run.pk])),
    }


def _finished_now(run: RefineRun) -> bool:
    run.refresh_from_db()
    return run.is_finished


@api_view(
    TokenScope.FULL,
    methods=("POST",),
    describe=Described(
        "Start a Self-Refine run: 200 with the result within LESSONBOARD_REFINE_API_WAIT, else 202 to poll",
        body=(RefineBody,),
        responses={200: RefineRunOut, 202: RefineRunOut},
        links={
            status: {"poll": {"operationId": "api-run", "parameters": {"run_id": "$response.body#/id"}}}
            for status in (200, 202)
        },
    ),
)
def refine(request: ApiRequest) -> JsonResponse:
    """Start a run; answer 200 with the result if it finishes within ``LESSONBOARD_REFINE_API_WAIT``,
    else 202 with the URL to poll."""
    asked = validated(RefineBody, json_body(request, max_bytes=4 * MAX_DRAFT_CHARS + 4 * MAX_TASK_CHARS + 4096))
    run = runs.start_run(
        task=asked.task,
        draft=asked.draft,
        agent=asked.agent or "",
        max_passes=asked.max_passes,
        token=request.agent_token,
        workspace=named_workspace(request.agent_token, asked.workspace),
    )
    # A waiting request holds a web thread: only LESSONBOARD_REFINE_API_MAX_WAITERS per web process wait
    # at once, the others answer 202 at once, so health checks and pages always find a free thread.
    if _waiters.acquire(blocking=False):
        try:
            if not run.is_finished:
                poll(lambda: _finished_now(run), timeout=settings.REFINE_API_WAIT, interval=POLL_INTERVAL)
        finally:
            _waiters.release()
    body = run_json(run, request)
    response = JsonResponse(body, status=200 if run.is_finished else 202)
    if not run.is_finished:
        response["Location"] = body["poll_url"]
    return response


@api_view(
    TokenScope.FULL,
    methods=("GET",),
    describe=Described("A Self-Refine run", responses={200: RefineRunOut}),
)
def refine_run(request: ApiRequest, run_id: int) -> JsonResponse:
    run = RefineRun.objects.select_related("workspace").filter(pk=run_id).first()
    bound = request.agent_token.workspaces
    # A bound token reads its own workspaces' runs only; another's is as absent as one never made (ids
    # are sequential: a 403 would confirm it exists).
    if run is None or (bound and (run.workspace is None or run.workspace.slug not in bound)):
        raise ApiError(f"no refine run {run_id}", status=404, field="id")
    return JsonResponse(run_json(run, request))


@api_view(
    TokenScope.FULL,
    methods=("GET", "POST"),
    describe=Described(
        "An agent's refine mode (GET ?agent=), or set it (POST)",
        query=ModeQuery,
        body=(ModeBody,),
        responses={200: Mode},
    ),
)
def refine_mode(request: ApiRequest) -> JsonResponse:
    """GET ``?agent=x`` → the agent's mode; POST ``{agent, mode}`` sets it (on / off / once / auto, and
    chatcli's aliases next = once, clear = auto)."""
    if request.method == "GET":
        query = validated(ModeQuery, request.GET.dict())
        agent = query.agent.strip()
        if not agent:
            raise ApiError("'agent' is required", field="agent")
        workspace = named_workspace(request.agent_token, query.workspace, create=False)
        if query.workspace and workspace is None:  # a workspace not made yet has no modes: not the pool's
            return JsonResponse({"agent": agent.lower(), "mode": RefineMode.AUTO})
        return JsonResponse({"agent": agent.lower(), "mode": AgentRefineMode.objects.mode_for(agent, workspace)})
    body = validated(ModeBody, json_body(request, max_bytes=8192))
    agent = body.agent.strip()
    if not agent:
        raise ApiError("'agent' is required", field="agent")
    mode = body.mode.strip().lower()
    # chatcli's /refine takes "next" for "once" and "clear" for "auto" (dropping the override).
    mode = MODE_ALIASES.get(mode, mode)
    if mode not in RefineMode.values:
        raise ApiError(f"'mode' must be one of {', '.join(RefineMode.values)}", field="mode")
    workspace = named_workspace(request.agent_token, body.workspace)
    row = runs.set_mode(agent, mode, token=request.agent_token, workspace=workspace)
    return JsonResponse({"agent": row.agent, "mode": row.mode})
