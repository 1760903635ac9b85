"""The operator's actions over the JSON API, under the ``operator`` token scope (docs/api.md#operator-api):
the dead-letter queue with the queue page's filters, retry and purge, a bulk action over a filter with its
preview first, pause/resume, and proposal approve/reject. Each calls the domain function its page action calls and is audited the
same way, the token named as the actor."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from pydantic import Field

from lessonboard import pauses
from lessonboard.api import ApiError, Described, api_view, json_body
from lessonboard.models import AuditEvent, TokenScope
from lessonboard.schemas import ErrorBody, QueryModel, RequestModel, ResponseModel, validated
from lessonq import bulk, dlq
from lessonq.forms import JobFilterForm
from lessonq.models import Job
from lessonq.triage import queries as triage
from lessonq.triage.models import BulkKind
from lessons.review import decisions
from lessons.review.models import Proposal

FILTER_FIELDS = ("tab", "q", "trigger", "agent", "workspace", "group", "newer", "older", "died", "sort")


class DlqQuery(QueryModel):
    tab: str = Field("dead", description="the queue page's tab (dead, pending, retrying, done, expired)")
    q: str = Field("", description="text in the task or the error, or a job id")
    trigger: str = ""
    agent: str = ""
    workspace: str = ""
    group: str = Field("", description="an error group's fingerprint (16 hex)")
    newer: str = Field("", description="enqueued within this age (1h, 24h, 7d, 30d)")
    older: str = Field("", description="enqueued before this age")
    died: str = Field("", description="finished within this age")
    sort: str = Field("", description="newest, oldest, attempts, …")
    after: str = Field("", description="the previous page's next")


class JobRow(ResponseModel):
    id: str
    state: str
    task: str
    agent: str
    workspace: str | None
    trigger: str
    attempts: int
    last_error: str
    error_group: str
    node: str
    enqueued_at: str
    finished_at: str | None


class DlqPage(ResponseModel):
    jobs: list[JobRow]
    next: str | None
    filter: dict[str, str]


class ReasonBody(RequestModel):
    reason: str = Field("", max_length=500, description="why (kept in the audit log)")


class ActionResult(ResponseModel):
    job_id: str
    state: str


class BulkBody(RequestModel):
    kind: str = Field(description="retry or purge")
    confirm: bool = Field(False, description="false: only the preview; true: start the bulk action")
    filter: dict[str, str] = Field(default_factory=dict, description="the queue page's filter fields")
    reason: str = Field("", max_length=500)


class BulkPreview(ResponseModel):
    kind: str
    matched: int
    eligible: int
    ineligible: dict[str, int]
    remote: dict[str, int]
    cap: int
    will_run: int
    bulk_id: int | None = None


class PauseState(ResponseModel):
    queue: str
    paused: bool
    changed: bool


def _deployment_wide(request: HttpRequest) -> None:
    """Operator actions reach every workspace's jobs and queues: a token bound to workspaces may not use them
    (403 naming ``token``; docs/api.md#operator-api)."""
    token = request.agent_token  # type: ignore[attr-defined]
    if token.workspaces:
        raise ApiError(
            "operator actions cover every workspace; this token is bound to workspace(s) "
            f"{', '.join(token.workspaces)} and may not use them",
            status=403,
            field="token",
        )


def _actor(request: HttpRequest) -> str:
    return f"token:{request.agent_token.name}"  # type: ignore[attr-defined]


def _job_filter(data: dict[str, Any]) -> Any:

    form = JobFilterForm({k: v for k, v in data.items() if k in FILTER_FIELDS})
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        raise ApiError(f"'{field}': {' '.join(str(e) for e in errors)}", field=field)
    return form.job_filter()


def _row(job: Any) -> dict[str, Any]:
    return {
        "id": job.id,
        "state": job.state,
        "task": job.task[:500],
        "agent": job.agent,
        "workspace": job.workspace.slug if job.workspace_id else None,
        "trigger": job.trigger,
        "attempts": job.attempts,
        "last_error": job.last_error[:2000],
        "error_group": job.fingerprint or "",
        "node": job.node,
        "enqueued_at": job.enqueued_at.isoformat(),
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


@api_view(
    TokenScope.OPERATOR,
    methods=("GET",),
    describe=Described(
        "The dead-letter queue (or another tab) with the queue page's filters, newest first by default",
        query=DlqQuery,
        responses={200: DlqPage},
    ),
)
def dlq_list(request: HttpRequest) -> JsonResponse:
    _deployment_wide(request)
    query = validated(DlqQuery, request.GET.dict())
    flt = _job_filter(query.model_dump())
    page = triage.keyset(
        flt.apply().select_related("workspace"),
        sort=flt.sort,
        cursor=query.after or None,
        size=settings.LESSONQ_TRIAGE_PAGE_SIZE,
    )
    return JsonResponse({"jobs": [_row(j) for j in page.rows], "next": page.next_cursor, "filter": flt.as_dict()})


def _dlq_action(request: HttpRequest, job_id: str, action: str) -> JsonResponse:
    _deployment_wide(request)
    body = validated(ReasonBody, json_body(request))
    job = Job.objects.filter(pk=job_id.lower()).first()
    if job is None:
        raise ApiError(f"no job {job_id!r}", status=404, field="job_id")
    if job.state != "dead":
        raise ApiError(f"job {job.pk} is not dead (it is {job.state}): nothing to {action}", status=409)
    try:
        if action == "retry":
            dlq.retry(job.pk, actor=_actor(request), reason=body.reason)
        else:
            dlq.purge(job.pk, actor=_actor(request), reason=body.reason)
    except dlq.DLQError as exc:
        raise ApiError(str(exc), status=409) from exc
    triage.forget_counts()
    job.refresh_from_db()
    return JsonResponse({"job_id": job.pk, "state": job.state})


ACTION_DOC = {"body": (ReasonBody,), "responses": {200: ActionResult}, "errors": (404, 409)}
JOB_PATH = {"job_id": {"type": "string", "pattern": "^[0-9a-fA-F]{16}$"}}


@api_view(
    TokenScope.OPERATOR,
    describe=Described("Retry a dead job, as the queue page's Retry", path=JOB_PATH, **ACTION_DOC),  # type: ignore[arg-type]
)
def dlq_retry(request: HttpRequest, job_id: str) -> JsonResponse:
    return _dlq_action(request, job_id, "retry")


@api_view(
    TokenScope.OPERATOR,
    describe=Described("Purge a dead job, as the queue page's Purge", path=JOB_PATH, **ACTION_DOC),  # type: ignore[arg-type]
)
def dlq_purge(request: HttpRequest, job_id: str) -> JsonResponse:
    return _dlq_action(request, job_id, "purge")


@api_view(
    TokenScope.OPERATOR,
    describe=Described(
        "A bulk retry or purge over everything matching a filter: the preview (counts first), and with "
        "confirm the action itself, run in the background",
        body=(BulkBody,),
        responses={200: BulkPreview, 202: BulkPreview},
    ),
)
def dlq_bulk(request: HttpRequest) -> JsonResponse:
    _deployment_wide(request)
    body = validated(BulkBody, json_body(request))
    if body.kind not in BulkKind.values:
        raise ApiError(f"'kind' must be one of {', '.join(BulkKind.values)}", field="kind")
    flt = _job_filter({**body.filter, "tab": body.filter.get("tab", "dead")})
    preview = triage.preview(body.kind, flt.apply(), scope="filter", sort=flt.sort)
    answer: dict[str, Any] = {
        "kind": body.kind,
        "matched": preview.matched,
        "eligible": preview.eligible,
        "ineligible": preview.ineligible,
        "remote": preview.remote,
        "cap": preview.cap,
        "will_run": len(preview.run_ids),
    }
    if not body.confirm:
        return JsonResponse(answer)
    if not preview.run_ids:
        raise ApiError("nothing eligible to act on (only dead jobs can be retried or purged)", status=409)
    action = bulk.start(body.kind, preview.run_ids, scope="filter", filter=flt.as_dict(), matched=preview.matched)
    # Who started it (the bulk's own queue.bulk_<kind> event, when it finishes, has no user for a token).
    AuditEvent.record(
        "queue.bulk_start",
        token=request.agent_token,  # type: ignore[attr-defined]
        object_type="queue.bulk",
        object_ids=[action.pk],
        filter=flt.as_dict(),
        result={"matched": preview.matched, "will_run": len(preview.run_ids)},
        reason=body.reason,
    )
    return JsonResponse({**answer, "bulk_id": action.pk}, status=202)


class DecisionBody(RequestModel):
    reason: str = Field(description="why (required; kept on the proposal and in the audit log)", max_length=500)


class DecisionResult(ResponseModel):
    id: int
    status: str = Field(description="applied, failed (the store refused it), or rejected")
    decision: str
    decided_by: str = Field(description="the person the token belongs to")
    message: str


def _decider(request: HttpRequest) -> Any:
    """The person a proposal decision over the API records (docs/api.md#proposal-decisions): the user the
    operator token was issued for. The token must hold the ``operator`` scope itself (a ``full`` token is an
    agent's), belong to an active user, and that user must have the reviewer role."""
    token = request.agent_token  # type: ignore[attr-defined]
    if TokenScope.OPERATOR not in token.scopes:
        raise ApiError(
            "deciding a proposal needs a token with the operator scope itself; a full token is an agent's",
            status=403,
            field="token",
        )
    user = token.created_by
    if user is None or not user.is_active:
        raise ApiError(
            "a decision records a person: this token belongs to no active user "
            "(create it with create_agent_token --for-user USERNAME)",
            status=403,
            field="token",
        )
    if not user.has_perm("lessonboard.review_memory"):
        raise ApiError(
            f"{user.get_username()}, the token's user, may not decide proposals (needs the reviewer or admin role)",
            status=403,
            field="token",
        )
    return user


def _decide(request: HttpRequest, pk: int, *, approve: bool) -> JsonResponse:
    body = validated(DecisionBody, json_body(request))
    reason = body.reason.strip()
    if not reason:
        raise ApiError("'reason' is required: say why (it is kept in the audit log)", field="reason")
    user = _decider(request)
    token = request.agent_token  # type: ignore[attr-defined]
    row = Proposal.objects.filter(pk=pk).select_related("workspace").first()
    if row is None or not token.may_name(row.workspace.slug):
        raise ApiError(f"no proposal {pk}", status=404, field="pk")  # another workspace's: not named
    try:
        if approve:
            row = decisions.approve(pk, user, token=token, reason=reason)
        else:
            row = decisions.reject(pk, user, token=token, reason=reason)
    except decisions.DecisionError as exc:
        raise ApiError(exc.message, status=exc.status, field="pk" if exc.status == 404 else None) from exc
    return JsonResponse(
        {
            "id": row.pk,
            "status": row.status,
            "decision": row.decision,
            "decided_by": user.get_username(),
            "message": row.message,
        }
    )


PROPOSAL_PATH = {"pk": {"type": "integer", "minimum": 1}}
DECISION_DOC = {
    "body": (DecisionBody,),
    "responses": {200: DecisionResult},
    "path": PROPOSAL_PATH,
    "errors": (404, 409),
    "error_text": {409: "the proposal was already decided, or a reviewer holds it"},
}


@api_view(
    TokenScope.OPERATOR,
    describe=Described(
        "Approve a pending proposal, as its page's Approve: the write is replayed into the store (which may "
        "still refuse it: failed); the decision records the token's user",
        **DECISION_DOC,  # type: ignore[arg-type]
    ),
)
def proposal_approve(request: HttpRequest, pk: int) -> JsonResponse:
    return _decide(request, pk, approve=True)


@api_view(
    TokenScope.OPERATOR,
    describe=Described(
        "Reject a pending proposal with a reason, as its page's Reject; the decision records the token's user",
        **DECISION_DOC,  # type: ignore[arg-type]
    ),
)
def proposal_reject(request: HttpRequest, pk: int) -> JsonResponse:
    return _decide(request, pk, approve=False)


QUEUE_PATH = {"name": {"type": "string", "enum": list(pauses.QUEUES)}}


def _pause_or_resume(request: HttpRequest, name: str, *, pause: bool) -> JsonResponse:
    _deployment_wide(request)
    body = validated(ReasonBody, json_body(request)) if pause else None  # the body first, then the path
    if name not in pauses.QUEUES:
        raise ApiError(f"no queue {name!r} (one of {', '.join(pauses.QUEUES)})", status=404, field="name")
    token = request.agent_token  # type: ignore[attr-defined]
    if body is not None:
        changed = pauses.pause(name, token=token, why=body.reason)
    else:
        changed = pauses.resume(name, token=token)
    return JsonResponse({"queue": name, "paused": pause, "changed": changed})


@api_view(
    TokenScope.OPERATOR,
    describe=Described(
        "Pause a queue (lessonq, refine, or llm: all LLM work); its work waits until resumed",
        body=(ReasonBody,),
        responses={200: PauseState},
        path=QUEUE_PATH,
        errors=(404,),
    ),
)
def queue_pause(request: HttpRequest, name: str) -> JsonResponse:
    return _pause_or_resume(request, name, pause=True)


@api_view(
    TokenScope.OPERATOR,
    describe=Described(
        "Resume a paused queue; what waited is dispatched at once",
        responses={200: PauseState},
        path=QUEUE_PATH,
        errors=(404,),
    ),
)
def queue_resume(request: HttpRequest, name: str) -> JsonResponse:
    return _pause_or_resume(request, name, pause=False)


__all__ = [
    "ErrorBody",
    "dlq_bulk",
    "dlq_list",
    "dlq_purge",
    "dlq_retry",
    "proposal_approve",
    "proposal_reject",
    "queue_pause",
    "queue_resume",
]
