"""``POST /api/v1/reflexion/triggers``: an agent reports a result; a lesson job is queued if a trigger fires."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.http import HttpResponse, JsonResponse

from lessonboard.api import ApiError, ApiRequest, api_view, json_body
from lessonboard.models import SLUG_RE, TokenScope
from lessonq.ingest import AgentResult, LessonRequest, detect, enqueue
from lessonq.models import Trigger
from lessonq.wal import MAX_PAYLOAD, PayloadTooLarge, WalError

_SURROGATE = re.compile("[\ud800-\udfff]")
# A body may carry up to a 16 MiB record plus JSON escaping overhead; the record itself is checked exactly.
MAX_BODY = MAX_PAYLOAD * 2
METADATA_FLAGS = (
    "verified_with_discrepancy",
    "verifier_discrepancies",
    "refine_low_quality",
    "refine_low_quality_reason",
    "force_reflexion",
)


def _text(data: dict[str, Any], field: str, *, required: bool = False) -> str:
    value = data.get(field)
    if value is None:
        if required:
            raise ApiError(f"'{field}' is required", field=field)
        return ""
    if not isinstance(value, str):
        raise ApiError(f"'{field}' must be a string", field=field)
    return _SURROGATE.sub("\ufffd", value)  # as Go's decoder does with a lone "\ud800"


def _metadata(data: dict[str, Any]) -> dict[str, str]:
    raw = data.get("metadata")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ApiError("'metadata' must be an object", field="metadata")
    out: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"  # JSON true means what chatcli's "true" means
        elif isinstance(value, str):
            out[key] = value
        elif isinstance(value, list) and key == "verifier_discrepancies" and all(isinstance(v, str) for v in value):
            out[key] = "; ".join(value)
        elif value is None:
            continue
        else:
            raise ApiError(f"'metadata.{key}' must be a string or a boolean", field=f"metadata.{key}")
    return out


def parse_request(data: dict[str, Any]) -> tuple[LessonRequest | None, str, str]:
    """``(request or None when no trigger fires, agent, workspace)`` from either body shape."""
    agent = _text(data, "agent")
    if len(agent) > 200:
        raise ApiError("'agent' is longer than 200 characters", field="agent")
    workspace = _text(data, "workspace").strip()
    if workspace and (len(workspace) > 100 or not re.fullmatch(SLUG_RE, workspace)):
        raise ApiError("'workspace' must be a slug: lower-case letters, digits, '.', '_' or '-'", field="workspace")
    if any(k in data for k in ("Task", "Attempt", "Outcome", "Trigger")):  # chatcli's raw LessonRequest
        trigger = _text(data, "Trigger", required=True)
        if trigger.strip().lower() not in Trigger.values:
            raise ApiError(f"'Trigger' must be one of {', '.join(Trigger.values)}", field="Trigger")
        return (
            LessonRequest(
                task=_text(data, "Task", required=True),
                attempt=_text(data, "Attempt"),
                outcome=_text(data, "Outcome"),
                trigger=trigger.strip().lower(),
            ),
            agent,
            workspace,
        )
    result = AgentResult(
        task=_text(data, "task", required=True),
        output=_text(data, "output"),
        error=_text(data, "error"),
        metadata=_metadata(data),
    )
    return detect(result), agent, workspace


@api_view(TokenScope.INGEST)
def triggers(request: ApiRequest) -> HttpResponse:
    if not settings.LESSONQ_ENABLED:
        raise ApiError("the lesson queue is disabled on this node (LESSONQ_ENABLED=false)", status=503)
    data = json_body(request, max_bytes=MAX_BODY)
    lesson_request, agent, workspace = parse_request(data)
    if lesson_request is None:
        return JsonResponse({"status": "no_trigger"}, status=200)
    try:
        result = enqueue(lesson_request, agent=agent, workspace=workspace or None, token=request.agent_token)
    except PayloadTooLarge as exc:
        raise ApiError(f"lesson record too large: {exc}", status=413, field="output") from exc
    except WalError as exc:
        raise ApiError(str(exc), status=400, field="task") from exc
    except OSError as exc:  # the WAL cannot be written (disk full, permissions): not durable, so not accepted
        raise ApiError(
            f"the lesson queue cannot store the trigger right now: {exc.strerror or exc}", status=503
        ) from exc
    return JsonResponse({"job_id": result.job_id, "status": result.status}, status=202)
