"""``POST /api/v1/workspaces/<slug>/reflect/prepare`` and ``…/commit``: AIOSON's ``--json`` results.

The body is the result object itself. Status: 200 for ``ok``, 202 when the human gate staged the
rewrite, 409 when the workspace state says no (no bootstrap, no manifest, no repository), 422 when the
rewrite is refused (validation, path wall), 400 for an unreadable body.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from pydantic import Field

from lessonboard.api import ApiError, Described, api_view, check_workspace, json_body
from lessonboard.models import TokenScope, Workspace
from lessonboard.schemas import SLUG_PATTERN, ErrorBody, RequestModel, ResponseModel, Says, validated
from lessons.reflect.commit import BadInput, commit_reflection, files_from_payload
from lessons.reflect.prepare import prepare_reflection
from lessons.reflect.repository import RepositoryError

# A revision range as git spells it; never an option (a leading "-" could make git write a file).
GIT_RANGE = re.compile(r"^[A-Za-z0-9_./~^@{}:+][A-Za-z0-9_./~^@{}:+-]*$")
STATUS_FOR_ERROR = {
    "missing_bootstrap": 409,
    "missing_manifest": 409,
    "validation_failed": 422,
    "path_escape": 422,
    "bad_input": 400,
    "write_failed": 409,
}


Short = Annotated[str, Field(max_length=200)]


class PrepareBody(RequestModel):
    agent: Short | None = None
    git_range: (
        Annotated[
            Short,
            Field(pattern=f"^({GIT_RANGE.pattern[1:-1]})?$"),
            Says("'git_range' is not a git revision range", on=("string_pattern_mismatch",)),
        ]
        | None
    ) = None
    session_id: Short | None = None
    force: bool | None = None


class CommitBody(RequestModel):
    agent: Short | None = None
    dry_run: bool | None = None
    files: dict[str, str] | list[Any] | None = Field(
        None, description="path → new content; anything but an object commits nothing (AIOSON's 'no files to commit')"
    )


class ReflectResult(ResponseModel):
    """AIOSON's ``--json`` result object, verbatim: ``ok``, and ``error``/``reason`` when not."""

    ok: bool


class PendingManifest(ResponseModel):
    workspace: str
    id: int
    created_at: str
    git_range: str
    snapshot_hash: str
    manifest: Any
    prompts: dict[str, str]


class Prompts(ResponseModel):
    prompts: dict[str, str]


# A workspace that can exist has a slug (any other answers 404).
SLUG_PATH = {"slug": {"type": "string", "pattern": SLUG_PATTERN}}
# The result object answers these as well as the API's own error body does.
RESULT_OR_ERROR = {400: (ErrorBody, ReflectResult), 409: (ErrorBody, ReflectResult), 422: (ReflectResult,)}


def _workspace(request: HttpRequest, slug: str) -> Workspace:
    check_workspace(request.agent_token, slug)  # type: ignore[attr-defined]
    workspace = Workspace.objects.filter(slug=slug).first()
    if workspace is None:
        raise ApiError(f"unknown workspace {slug!r}", status=404, field="workspace")
    return workspace


def git_range_from(value: str) -> str:
    if value and not GIT_RANGE.match(value):
        raise ApiError("'git_range' is not a git revision range", field="git_range")
    return value


def _answer(result: dict[str, Any]) -> JsonResponse:
    if result.get("ok"):
        return JsonResponse(result, status=202 if result.get("pending") else 200)
    status = 409 if result.get("reason") == "missing_bootstrap" else STATUS_FOR_ERROR.get(result.get("error", ""), 400)
    return JsonResponse(result, status=status)


@api_view(
    TokenScope.FULL,
    describe=Described(
        "Prepare a doc reflection (AIOSON's prepare --json)",
        body=(PrepareBody,),
        responses={200: ReflectResult, 202: ReflectResult, **RESULT_OR_ERROR},
        path=SLUG_PATH,
    ),
)
def prepare(request: HttpRequest, slug: str) -> JsonResponse:
    workspace = _workspace(request, slug)
    body = validated(PrepareBody, json_body(request, max_bytes=64 * 1024))
    git_range = git_range_from(body.git_range or "")  # the schema's pattern, checked by Python's regex too
    try:
        result = prepare_reflection(
            workspace=workspace,
            agent=body.agent or "",
            git_range=git_range,
            force=bool(body.force),
            session_id=body.session_id or "",
        )
    except RepositoryError as exc:
        raise ApiError(str(exc), status=409, field="workspace") from exc
    return _answer(result)


@api_view(
    TokenScope.FULL,
    describe=Described(
        "Commit a doc reflection's rewritten files (AIOSON's commit --json)",
        body=(CommitBody,),
        responses={200: ReflectResult, 202: ReflectResult, **RESULT_OR_ERROR},
        path=SLUG_PATH,
    ),
)
def commit(request: HttpRequest, slug: str) -> JsonResponse:
    workspace = _workspace(request, slug)
    data = json_body(
        request, max_bytes=settings.REFLECT_MAX_COMMIT_BYTES, setting="LESSONBOARD_REFLECT_MAX_COMMIT_BYTES"
    )
    body = validated(CommitBody, data)
    agent, dry_run = body.agent or "", bool(body.dry_run)
    try:
        files = files_from_payload(data)
    except BadInput as exc:
        raise ApiError(str(exc), field="files") from exc
    try:
        result = commit_reflection(
            workspace=workspace,
            files=files,
            agent=agent,
            dry_run=dry_run,
            token=request.agent_token,  # type: ignore[attr-defined]
        )
    except RepositoryError as exc:
        raise ApiError(str(exc), status=409, field="workspace") from exc
    response = _answer(result)
    return response


PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
# AIOSON ships a reflect prompt for these three targets and none for what-is.md (docs/compat/aioson.md).
PROMPT_NAMES = ("current-state", "how-it-works", "what-it-does")


def reflect_prompts() -> dict[str, str]:
    """The reflect prompt templates an agent follows when it edits each target, in lessonboard's words."""
    return {name: (PROMPTS_DIR / f"{name}.md").read_text(encoding="utf-8") for name in PROMPT_NAMES}


@api_view(
    TokenScope.FULL,
    methods=("GET",),
    describe=Described(
        "The workspace's pending reflect manifest, with its prompts", responses={200: PendingManifest}, path=SLUG_PATH
    ),
)
def pending_manifest(request: HttpRequest, slug: str) -> JsonResponse:
    """``GET …/reflect/manifest`` → the workspace's pending manifest (what prepare wrote, verbatim) with
    the prompt template of each target; 404 when no manifest waits for a commit."""
    workspace = _workspace(request, slug)
    row = workspace.reflect_manifests.pending().order_by("-created_at", "-id").first()
    if row is None:
        raise ApiError(f"no pending reflect manifest for workspace {slug!r}: run prepare first", status=404)
    prompts = reflect_prompts()
    targets = [str(t.get("file", t)) if isinstance(t, dict) else str(t) for t in row.targets]
    return JsonResponse(
        {
            "workspace": slug,
            "id": row.pk,
            "created_at": row.created_at.isoformat(),
            "git_range": row.git_range,
            "snapshot_hash": row.snapshot_hash,
            "manifest": row.data,
            "prompts": {name: text for name, text in prompts.items() if any(name in target for target in targets)},
        }
    )


@api_view(
    TokenScope.FULL, methods=("GET",), describe=Described("Every reflect prompt template", responses={200: Prompts})
)
def prompts(request: HttpRequest) -> JsonResponse:
    """``GET /api/v1/reflect/prompts`` → every reflect prompt template, by target name."""
    return JsonResponse({"prompts": reflect_prompts()})
