"""``POST /api/v1/refine``, ``GET /api/v1/refine/<id>`` and the per-agent mode endpoint."""

from __future__ import annotations

import threading
import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import reverse

from lessonboard.api import ApiError, ApiRequest, api_view, json_body, require_str
from lessonboard.models import TokenScope
from refine import runs
from refine.models import AgentRefineMode, RefineMode, RefineRun

MAX_DRAFT_CHARS = 200_000
MAX_TASK_CHARS = 50_000
POLL_INTERVAL = 0.1
_pause = threading.Event()  # never set: .wait(interval) is a pause with a deadline around it


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


def _max_passes(data: dict[str, Any]) -> int | None:
    value = data.get("max_passes")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError("'max_passes' must be an integer", field="max_passes")
    limit = settings.REFINE_MAX_PASSES_LIMIT
    if not 1 <= value <= limit:
        raise ApiError(f"'max_passes' must be between 1 and {limit}", field="max_passes")
    return value


@api_view(TokenScope.FULL, methods=("POST",))
def refine(request: ApiRequest) -> JsonResponse:
    """Start a run; answer 200 with the result if it finishes within ``LESSONBOARD_REFINE_API_WAIT``,
    else 202 with the URL to poll."""
    data = json_body(request, max_bytes=4 * MAX_DRAFT_CHARS + 4 * MAX_TASK_CHARS + 4096)
    task = require_str(data, "task", max_length=MAX_TASK_CHARS)
    draft = require_str(data, "draft", max_length=MAX_DRAFT_CHARS)
    agent = require_str(data, "agent", required=False, max_length=200)
    max_passes = _max_passes(data)
    run = runs.start_run(task=task, draft=draft, agent=agent, max_passes=max_passes, token=request.agent_token)
    deadline = time.monotonic() + settings.REFINE_API_WAIT
    while not run.is_finished and time.monotonic() < deadline:
        _pause.wait(POLL_INTERVAL)
        run.refresh_from_db()
    body = run_json(run, request)
    response = JsonResponse(body, status=200 if run.is_finished else 202)
    if not run.is_finished:
        response["Location"] = body["poll_url"]
    return response


@api_view(TokenScope.FULL, methods=("GET",))
def refine_run(request: ApiRequest, run_id: int) -> JsonResponse:
    run = RefineRun.objects.filter(pk=run_id).first()
    if run is None:
        raise ApiError(f"no refine run {run_id}", status=404, field="id")
    return JsonResponse(run_json(run, request))


@api_view(TokenScope.FULL, methods=("GET", "POST"))
def refine_mode(request: ApiRequest) -> JsonResponse:
    """GET ``?agent=x`` → the agent's mode; POST ``{agent, mode}`` sets it (on / off / once / auto)."""
    if request.method == "GET":
        agent = request.GET.get("agent", "").strip()
        if not agent:
            raise ApiError("'agent' is required", field="agent")
        return JsonResponse({"agent": agent.lower(), "mode": AgentRefineMode.objects.mode_for(agent)})
    data = json_body(request, max_bytes=8192)
    agent = require_str(data, "agent", max_length=200).strip()
    if not agent:
        raise ApiError("'agent' is required", field="agent")
    mode = require_str(data, "mode", max_length=10).strip().lower()
    if mode == "clear":  # chatcli's /refine clear drops the override
        mode = RefineMode.AUTO
    if mode not in RefineMode.values:
        raise ApiError(f"'mode' must be one of {', '.join(RefineMode.values)}", field="mode")
    row = runs.set_mode(agent, mode, token=request.agent_token)
    return JsonResponse({"agent": row.agent, "mode": row.mode})
