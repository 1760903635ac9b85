"""lessonboard as an MCP server: the agent-facing API as Model Context Protocol tools.

The tools are thin: each one hands its arguments to the same code as the JSON API
(``lessonboard.api.call_view`` runs the endpoint in-process, scope check and validation included; the
memory proposal resolves its workspace with the API's ``workspace_for``, the token's workspace binding and
its right to create workspaces included, and goes through ``lessons.review.staging.run_review`` with the
agent as the proposer), so the two front doors cannot drift apart. The MCP SDK (``mcp``) does the
protocol: JSON-RPC, the tool schemas it derives from the signatures below, argument validation and the
tool-error shape.

Transport: Streamable HTTP in stateless, JSON-response mode, served by Django at ``/mcp`` (see
``console.mcp.views``): every POST carries one JSON-RPC message and gets its answer in the response
body, so any gunicorn worker can answer it and nothing is kept between requests.
"""

from __future__ import annotations

import contextvars
from typing import Annotated, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from lessonboard.api import ApiError, call_view, workspace_for
from lessonboard.llm import limiter, usage
from lessonboard.models import AgentToken, TokenScope
from lessons.review.api_views import outcome_payload, workspace_slug
from lessons.review.proposals import InvalidProposal, parse_proposal
from lessons.review.scoring import rescored
from lessons.review.staging import run_review

# The token the current /mcp request authenticated with; set by the view around each request.
current_token: contextvars.ContextVar[AgentToken | None] = contextvars.ContextVar("mcp_token", default=None)

INSTRUCTIONS = """\
lessonboard keeps lessons learned from earlier agent runs. Before a task, call retrieve_lessons with the
task and put the returned memory_block into your context. After a task, call report_result with what
happened and the retrieval_id retrieve_lessons gave (an error or a poor result becomes a lesson for next
time); when there is nothing to report but how it went, call report_outcome with that retrieval_id,
success and a note, so lessonboard learns which lessons help. To change long-term memory directly, call
propose_memory: the workspace's gates apply it, reject it, or hold it for a person to approve. To read one
lesson (by the id retrieve_lessons gave) and its versions, call get_lesson; to page through a workspace's
lessons, list_lessons; to correct a lesson (a new version), update_lesson; to remove a wrong one (a
tombstone that can be restored), forget_lesson; to make a lesson hold for every workspace (or take it back
to its own), share_lesson."""

server: MCPServer[Any] = MCPServer(
    name="lessonboard",
    title="lessonboard — lessons from agent failures",
    instructions=INSTRUCTIONS,
    warn_on_duplicate_tools=False,
)


def _token(scope: str) -> AgentToken:
    token = current_token.get()
    if token is None:  # pragma: no cover - the view always sets it
        raise ToolError("not authenticated")
    if not token.has_scope(scope):
        raise ToolError(f"this token lacks the '{scope}' scope")
    return token


def _refusal(message: str, field: str | None) -> ToolError:
    return ToolError(f"{message} (argument: {field})" if field else message)


def _answer(status: int, body: Any) -> dict[str, Any]:
    """The endpoint's answer as the tool's result; a 4xx/5xx becomes a tool error naming the field."""
    if status >= 400:
        message = body.get("error", f"failed with HTTP {status}") if isinstance(body, dict) else str(body)
        field = body.get("field") if isinstance(body, dict) else None
        raise _refusal(message, field)
    return body if isinstance(body, dict) else {"result": body}


@sync_to_async
def _call(view_path: str, scope: str, data: dict[str, Any]) -> dict[str, Any]:
    from django.utils.module_loading import import_string

    token = _token(scope)
    status, body = call_view(import_string(view_path), token, {k: v for k, v in data.items() if v is not None})
    return _answer(status, body)


@server.tool(
    description=(
        "Find the lessons that apply to a task before you start it. Returns `memory_block` (a "
        "'## Long-term Memory' section to put into your context as is) and `lessons` (each with its id, "
        "situation, mistake, correction, tags and retrieval score). An empty `lessons` list means nothing "
        "relevant is known yet."
    )
)
async def retrieve_lessons(
    task: Annotated[str, Field(description="The task you are about to do, in your own words.", min_length=1)],
    k: Annotated[int, Field(description="How many lessons at most (1-50).", ge=1, le=50)] = 5,
    workspace: Annotated[
        str | None,
        Field(description="Your workspace (project slug): its lessons and the shared tier; omit for all."),
    ] = None,
    scope: Annotated[
        str, Field(description="all (default: the workspace's and the shared tier's), workspace or shared.")
    ] = "all",
    agent: Annotated[str | None, Field(description="Your agent name (recorded; see agent_mode).")] = None,
    agent_mode: Annotated[
        str, Field(description="record (default), only (lessons this agent learned) or first (those first).")
    ] = "record",
) -> dict[str, Any]:
    data = {"task": task, "k": k, "workspace": workspace, "scope": scope, "agent": agent, "agent_mode": agent_mode}
    return await _call("lessons.api_views.retrieve", TokenScope.FULL, data)


@server.tool(
    description=(
        "Read one lesson by its id (as retrieve_lessons returns it) and, with history=true, every version "
        "of it: who or what changed it, why, and the lesson's fields after the change."
    )
)
async def get_lesson(
    id: Annotated[int, Field(description="The lesson's id.", ge=1)],
    history: Annotated[bool, Field(description="Also return every version, newest first.")] = False,
) -> dict[str, Any]:
    return await _call("lessons.api_views.get_lesson", TokenScope.FULL, {"id": id, "history": history})


@server.tool(
    description=(
        "List lessons newest first, a page at a time: filter by workspace, scope, status (active, archived, "
        "superseded, deleted or any), tags and agent; pass the returned next_cursor as cursor for the next page."
    )
)
async def list_lessons(
    workspace: Annotated[
        str | None, Field(description="Only this workspace (project slug), with the shared tier (see scope).")
    ] = None,
    scope: Annotated[str, Field(description="all (default), workspace or shared.")] = "all",
    status: Annotated[
        str, Field(description="active (default), archived, superseded, deleted or any (all but deleted).")
    ] = "active",
    tags: Annotated[list[str] | None, Field(description="Only lessons having all of these tags.")] = None,
    agent: Annotated[str | None, Field(description="Only lessons learned by this agent.")] = None,
    cursor: Annotated[str | None, Field(description="next_cursor of the previous page.")] = None,
    limit: Annotated[int, Field(description="Lessons per page (1-200).", ge=1, le=200)] = 50,
) -> dict[str, Any]:
    data = {"workspace": workspace, "status": status, "tags": tags, "agent": agent, "cursor": cursor, "limit": limit}
    data["scope"] = scope
    return await _call("lessons.api_views.list_lessons", TokenScope.FULL, data)


@server.tool(
    description=(
        "Correct a lesson by its id: give only the fields to change (situation, mistake, correction, tags, "
        "trigger, confidence, lang) and why. The lesson keeps every earlier version (get_lesson with history); "
        "changed is false, and no version is written, when every value given is the lesson's already."
    )
)
async def update_lesson(
    id: Annotated[int, Field(description="The lesson's id.", ge=1)],
    situation: Annotated[str | None, Field(description="When the lesson applies.")] = None,
    mistake: Annotated[str | None, Field(description="What went wrong.")] = None,
    correction: Annotated[str | None, Field(description="What to do instead.")] = None,
    tags: Annotated[list[str] | None, Field(description="The lesson's tags (replaces them).")] = None,
    trigger: Annotated[str | None, Field(description="What triggered it (error, low_quality, manual…).")] = None,
    confidence: Annotated[float | None, Field(description="0 to 1.", ge=0.0, le=1.0)] = None,
    lang: Annotated[
        str | None, Field(description="The lesson's language (en, pt…; empty: detect it from the text).")
    ] = None,
    reason: Annotated[str, Field(description="Why it changes.")] = "",
) -> dict[str, Any]:
    data: dict[str, Any] = {"id": id, "situation": situation, "mistake": mistake, "correction": correction}
    data.update(tags=tags, trigger=trigger, confidence=confidence, lang=lang, reason=reason)
    return await _call("lessons.api_views.update_lesson", TokenScope.FULL, data)


@server.tool(
    description=(
        "Forget a lesson by its id: it is no longer served or listed (a tombstone; its history is kept and a "
        "person can restore it). Say why."
    )
)
async def forget_lesson(
    id: Annotated[int, Field(description="The lesson's id.", ge=1)],
    reason: Annotated[str, Field(description="Why it is wrong or no longer applies.")] = "",
) -> dict[str, Any]:
    return await _call("lessons.api_views.delete_lesson", TokenScope.FULL, {"id": id, "reason": reason})


@server.tool(
    description=(
        "Share a lesson by its id with every workspace (scope 'shared': each workspace's retrieve_lessons "
        "finds it), or take it back to its own workspace (scope 'workspace'). Say why; it is audited."
    )
)
async def share_lesson(
    id: Annotated[int, Field(description="The lesson's id.", ge=1)],
    scope: Annotated[str, Field(description="'shared' (team-wide) or 'workspace' (its own only).")] = "shared",
    reason: Annotated[str, Field(description="Why it holds across workspaces, or no longer does.")] = "",
) -> dict[str, Any]:
    return await _call("lessons.api_views.scope_lesson", TokenScope.FULL, {"id": id, "scope": scope, "reason": reason})


@server.tool(
    description=(
        "Report how a task went. When the result shows a failure (an error, a failing check, a low "
        "quality score in metadata), lessonboard queues it durably and a worker turns it into a lesson. "
        "Returns `status`: `accepted` (queued, with `job_id`), `deduped` (the same report is already "
        "queued), `reinforced` (learnt before: its lesson counted this occurrence) or `no_trigger` "
        "(nothing to learn from)."
    )
)
async def report_result(
    task: Annotated[str, Field(description="The task as it was given to you.", min_length=1)],
    output: Annotated[str | None, Field(description="What you produced (final answer, last output).")] = None,
    error: Annotated[str | None, Field(description="The error you hit, if any.")] = None,
    metadata: Annotated[
        dict[str, str] | None,
        Field(description="Extra string facts, e.g. {'refine_low_quality': 'true'} or a workspace/agent."),
    ] = None,
    agent: Annotated[str | None, Field(description="Your agent name, kept with the lesson.")] = None,
    workspace: Annotated[str | None, Field(description="The workspace (project slug) you worked in.")] = None,
    retrieval_id: Annotated[
        int | None,
        Field(description="The retrieval_id retrieve_lessons gave for this task: records how the task went."),
    ] = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {"task": task, "output": output, "error": error, "metadata": metadata, "agent": agent}
    data.update(workspace=workspace, retrieval_id=retrieval_id)
    return await _call("lessonq.api.triggers", TokenScope.INGEST, data)


@server.tool(
    description=(
        "Say how a task went after retrieve_lessons, using the retrieval_id it returned: success true or "
        "false, and a short note. lessonboard learns from this which lessons help. (report_result with "
        "retrieval_id does the same and also queues a lesson when the task failed.)"
    )
)
async def report_outcome(
    retrieval_id: Annotated[int, Field(description="The retrieval_id from retrieve_lessons.", ge=1)],
    success: Annotated[bool, Field(description="Whether the task went well.")],
    note: Annotated[str | None, Field(description="What happened, in a sentence.")] = None,
) -> dict[str, Any]:
    data = {"retrieval_id": retrieval_id, "success": success, "note": note}
    return await _call("lessons.api_views.outcome", TokenScope.INGEST, data)


@server.tool(
    description=(
        "Propose one change to long-term memory (hermes' reviewAndLearn): `target` is 'memory' (facts about "
        "the environment), 'user' (the user's preferences) or 'lesson'; `op` is 'add', 'replace' or "
        "'remove' (lessons: 'add' only). The workspace's gates decide: the result has the proposal in "
        "exactly one of `applied`, `rejected`, `failed` (the store refused it, with its reason) or "
        "`pending` (held for a person to approve)."
    )
)
async def propose_memory(
    target: Annotated[str, Field(description="'memory', 'user' or 'lesson'.")],
    op: Annotated[str, Field(description="'add', 'replace' or 'remove'.")],
    content: Annotated[
        str | None, Field(description="The new entry (add/replace). For a lesson: what to do next time.")
    ] = None,
    old_text: Annotated[
        str | None, Field(description="A unique part of the entry to replace or remove (replace/remove).")
    ] = None,
    rationale: Annotated[str, Field(description="Why this belongs in memory.")] = "",
    score: Annotated[
        float,
        Field(
            description="Your confidence, 0 to 1: advisory, shown to the reviewer; the server scores it.",
            ge=0.0,
            le=1.0,
        ),
    ] = 0.5,
    workspace: Annotated[str, Field(description="The workspace (project slug) whose memory to change.")] = "default",
    situation: Annotated[str | None, Field(description="For a lesson: the situation in which it applies.")] = None,
    mistake: Annotated[str | None, Field(description="For a lesson: what went wrong.")] = None,
    agent: Annotated[str | None, Field(description="Your agent name, kept with the proposal.")] = None,
) -> dict[str, Any]:
    raw: dict[str, Any] = {"target": target, "op": op, "rationale": rationale, "score": float(score)}
    if target == "lesson":
        raw["lesson"] = {"situation": situation or "", "mistake": mistake or "", "correction": content or ""}
    else:
        raw["content"] = content
        raw["old_text"] = old_text
    return await _propose(raw, workspace, agent or "")


@sync_to_async
def _propose(raw: dict[str, Any], slug: str, agent: str) -> dict[str, Any]:
    token = _token(TokenScope.FULL)
    try:
        slug = workspace_slug(slug)
        proposal = parse_proposal({k: v for k, v in raw.items() if v is not None})
        # As ``POST /api/v1/reviews`` does: a bound token names only its own workspaces, and an unknown
        # workspace is created only for a token that may create one.
        workspace = workspace_for(token, slug)
    except ApiError as exc:
        raise _refusal(exc.message, exc.field) from exc
    except InvalidProposal as exc:
        raise ToolError(str(exc)) from exc
    summary = f"proposal from {agent or token.name} over MCP: {proposal.label()}"
    if proposal.rationale:
        summary += f" — {proposal.rationale}"
    summary = summary[: settings.REVIEW_SUMMARY_MAX]
    # The agent is the proposer: the pass, its gates, the store and the records are the API's own.
    # The gate reads the server's score (docs/reviews.md#who-scores); the agent's own is advisory.
    # The review model's call is LLM work in a web thread: one of this process's places for it, no wait
    # for a node slot (docs/api.md#reviews-when-busy); with none free the heuristic scores it.
    try:
        # Its LLM call counts against the workspace and agent it is for (the review pass's own context
        # opens only in run_review, below).
        with limiter.web_call(), usage.context(workspace=workspace.slug, agent=agent):
            proposal = rescored(proposal)
    except limiter.WebShareFull as exc:
        proposal = rescored(proposal, model=False)
        proposal = proposal.model_copy(update={"score_reason": f"{proposal.score_reason} ({exc.message})"})
    result = run_review(workspace, summary, agent=agent, proposer=lambda _summary: [proposal], token=token)
    if result.error is not None:
        raise ToolError(f"{result.error.stage}: {result.error.message}")
    rows = list(result.run.proposals.order_by("position"))
    return {"run": result.run.pk, "workspace": slug, **outcome_payload(rows)}
