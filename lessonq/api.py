"""``POST /api/v1/reflexion/triggers``: an agent reports a result; a lesson job is queued if a trigger fires."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpResponse, JsonResponse
from pydantic import BeforeValidator, Field

from lessonboard.api import ApiError, ApiRequest, Described, api_view, check_workspace, json_body, workspace_for
from lessonboard.models import SLUG_RE, AgentToken, TokenScope
from lessonboard.schemas import PATTERN, SLUG_MESSAGE, RequestModel, ResponseModel, Says, validated
from lessonq.ingest import AgentResult, LessonRequest, detect, enqueue
from lessonq.models import Trigger
from lessonq.wal import MAX_PAYLOAD, PayloadTooLarge, WalError
from lessons.usage.outcomes import OutcomeError, report_outcome

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


def go_text(value: Any) -> Any:
    """WAL-bound text as Go's JSON decoder reads it: a lone surrogate becomes U+FFFD; NUL stays."""
    if not isinstance(value, str) or value.isascii():  # isascii reads a flag: the common case costs nothing
        return value
    return _SURROGATE.sub("\ufffd", value)


def _go_metadata(value: Any) -> Any:
    """``metadata``'s keys and texts through ``go_text``; copied only when one of them is not ASCII."""
    if not isinstance(value, dict):
        return value
    items = [v for item in value.values() for v in (item if isinstance(item, list) else (item,))]
    if all(not isinstance(text, str) or text.isascii() for text in (*value, *items)):
        return value
    return {
        go_text(key): [go_text(v) for v in item] if isinstance(item, list) else go_text(item)
        for key, item in value.items()
    }


WalText = Annotated[str, BeforeValidator(go_text)]
Agent = Annotated[
    WalText, Field(max_length=200, pattern="^[^\\x00]*$"), Says("'agent' contains a NUL character", on=PATTERN)
]
RetrievalId = Annotated[int, Field(ge=1), Says("'retrieval_id' must be a positive integer id")]


class _TriggerCommon(RequestModel):
    agent: Agent | None = None
    # Surrounding spaces are forgiven, and "" means none.
    workspace: WalText | None = Field(None, description=SLUG_MESSAGE)
    retrieval_id: RetrievalId | None = Field(
        None, description="the retrieval this task followed: the trigger is also its outcome"
    )


class AgentResultBody(_TriggerCommon):
    """An agent's result; a lesson job is queued when a trigger fires (docs/queue.md)."""

    task: WalText
    output: WalText | None = None
    error: WalText | None = None
    metadata: Annotated[
        dict[str, str | bool | list[str] | None] | None,
        BeforeValidator(_go_metadata),
        Field(description='chatcli\'s flags; true means "true"; a list only for verifier_discrepancies'),
    ] = None


class ChatcliLessonRequest(_TriggerCommon):
    """chatcli's raw ``LessonRequest``: chosen when any of ``Task``, ``Attempt``, ``Outcome``, ``Trigger``
    is present."""

    Task: WalText
    Attempt: WalText | None = None
    Outcome: WalText | None = None
    Trigger: WalText = Field(description=f"one of {', '.join(Trigger.values)} (any case)")


class NoTrigger(ResponseModel):
    status: Literal["no_trigger"]
    outcome: str | None = Field(None, description="with retrieval_id: success, or why it was not recorded")


class Queued(ResponseModel):
    job_id: str
    status: str = Field(
        description="accepted, deduped (the job is still active), or reinforced (docs/queue.md#repeated-failures)"
    )
    lesson_id: int | None = Field(None, description="reinforced: the lesson that counted the occurrence")
    occurrences: int | None = Field(None, description="reinforced: how often the failure was reported")
    outcome: str | None = Field(None, description="with retrieval_id: failure, or why it was not recorded")


RAW_KEYS = ("Task", "Attempt", "Outcome", "Trigger")


def _metadata(raw: dict[str, str | bool | list[str] | None] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (raw or {}).items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"  # JSON true means what chatcli's "true" means
        elif isinstance(value, str):
            out[key] = value
        elif isinstance(value, list) and key == "verifier_discrepancies":
            out[key] = "; ".join(value)
        elif value is not None:
            raise ApiError(f"'metadata.{key}' must be a string or a boolean", field=f"metadata.{key}")
    return out


def parse_request(data: dict[str, Any]) -> tuple[LessonRequest | None, str, str, int | None]:
    """``(request or None when no trigger fires, agent, workspace, retrieval_id)`` from either body shape."""
    if any(k in data for k in RAW_KEYS):  # chatcli's raw LessonRequest
        raw = validated(ChatcliLessonRequest, data)
        workspace = _workspace(raw.workspace)
        _required_task(raw.Task, "Task")
        trigger = raw.Trigger.strip().lower()
        if trigger not in Trigger.values:
            raise ApiError(f"'Trigger' must be one of {', '.join(Trigger.values)}", field="Trigger")
        request = LessonRequest(task=raw.Task, attempt=raw.Attempt or "", outcome=raw.Outcome or "", trigger=trigger)
        return request, raw.agent or "", workspace, raw.retrieval_id
    body = validated(AgentResultBody, data)
    _required_task(body.task, "task")
    workspace = _workspace(body.workspace)
    result = AgentResult(
        task=body.task, output=body.output or "", error=body.error or "", metadata=_metadata(body.metadata)
    )
    return detect(result), body.agent or "", workspace, body.retrieval_id


def _required_task(task: str, field: str) -> None:
    """docs/agents.md: the task is required; an empty (or all-blank) one would be every agent's same job."""
    if not task.strip():
        raise ApiError(f"'{field}' is required and must not be empty", field=field)


def _workspace(value: str | None) -> str:
    # Spaces around the slug are forgiven; any other whitespace (a trailing newline) is refused.
    workspace = (value or "").strip(" ")
    if workspace and not re.fullmatch(SLUG_RE, workspace):
        raise ApiError(SLUG_MESSAGE, field="workspace")
    return workspace


@api_view(
    TokenScope.INGEST,
    describe=Described(
        "Report an agent's result; queue a lesson job when a trigger fires",
        body=(AgentResultBody, ChatcliLessonRequest),
        responses={200: NoTrigger, 202: Queued},
    ),
)
def triggers(request: ApiRequest) -> HttpResponse:
    if not settings.LESSONQ_ENABLED:
        raise ApiError("the lesson queue is disabled on this node (LESSONQ_ENABLED=false)", status=503)
    # WAL-bound text keeps NUL (the JobID is computed from the exact text); the row stores a visible
    # replacement (docs/api.md#input-policy).
    data = json_body(request, max_bytes=MAX_BODY, keep_text=True)
    lesson_request, agent, workspace, served_for = parse_request(data)
    if lesson_request is None:
        return JsonResponse(
            {"status": "no_trigger", **_outcome(served_for, success=True, token=request.agent_token)}, status=200
        )
    if not workspace and request.agent_token.workspaces:
        # A bound token may not report into the workspace-less pool (its lesson would serve every unbound agent).
        raise ApiError("'workspace' is required for a token bound to workspaces", field="workspace")
    if workspace:
        try:
            workspace_for(request.agent_token, workspace)  # bound tokens; who may create one
        except DatabaseError:
            # The database is down: the binding still holds (the token's copy carries it); the row, and
            # with it the creation check, waits for the WAL replay.
            check_workspace(request.agent_token, workspace)
    try:
        result = enqueue(lesson_request, agent=agent, workspace=workspace or None, token=request.agent_token)
    except PayloadTooLarge as exc:
        raise ApiError(
            f"lesson record too large: {exc} (the limit is {MAX_PAYLOAD} bytes, chatcli's record limit, fixed)",
            status=413,
            field="output",
        ) from exc
    except WalError as exc:
        raise ApiError(str(exc), status=400, field="task") from exc
    except OSError as exc:  # the WAL cannot be written (disk full, permissions): not durable, so not accepted
        raise ApiError(
            f"the lesson queue cannot store the trigger right now: {exc.strerror or exc}", status=503
        ) from exc
    body = {
        "job_id": result.job_id,
        "status": result.status,
        **({"lesson_id": result.lesson_id, "occurrences": result.occurrences} if result.lesson_id else {}),
        **_outcome(served_for, success=False, token=request.agent_token),
    }
    return JsonResponse(body, status=202)


def _outcome(retrieval: int | None, *, success: bool, token: AgentToken) -> dict[str, str]:
    """A trigger naming the retrieval it followed is that task's outcome: a failure when a trigger fired,
    a success when none did. The trigger is answered whatever happens here (it is already durable)."""
    if retrieval is None:
        return {}
    try:
        report_outcome(retrieval, success=success, token=token)
    except OutcomeError as exc:
        return {"outcome": f"not recorded: {exc.message}"}
    except DatabaseError:
        return {"outcome": "not recorded: the database is unavailable"}
    return {"outcome": "success" if success else "failure"}
