"""``POST /api/v1/workspaces/<slug>/reflect/prepare`` and ``…/commit``: AIOSON's ``--json`` results.

The body is the result object itself. Status: 200 for ``ok``, 202 when the human gate staged the
rewrite, 409 when the workspace state says no (no bootstrap, no manifest, no repository), 422 when the
rewrite is refused (validation, path wall), 400 for an unreadable body.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse

from lessonboard.api import ApiError, api_view, json_body, require_str
from lessonboard.models import TokenScope, Workspace
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


def _workspace(slug: str) -> Workspace:
    workspace = Workspace.objects.filter(slug=slug).first()
    if workspace is None:
        raise ApiError(f"unknown workspace {slug!r}", status=404, field="workspace")
    return workspace


def _text(data: dict[str, Any], name: str) -> str:
    value = require_str(data, name, required=False, max_length=200)
    if "\0" in value:
        raise ApiError(f"'{name}' contains a NUL character", field=name)
    return value


def _flag(data: dict[str, Any], name: str) -> bool:
    value = data.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(f"'{name}' must be true or false", field=name)
    return value


def git_range_from(value: str) -> str:
    if value and not GIT_RANGE.match(value):
        raise ApiError("'git_range' is not a git revision range", field="git_range")
    return value


def _answer(result: dict[str, Any]) -> JsonResponse:
    if result.get("ok"):
        return JsonResponse(result, status=202 if result.get("pending") else 200)
    status = 409 if result.get("reason") == "missing_bootstrap" else STATUS_FOR_ERROR.get(result.get("error", ""), 400)
    return JsonResponse(result, status=status)


@api_view(TokenScope.FULL)
def prepare(request: HttpRequest, slug: str) -> JsonResponse:
    workspace = _workspace(slug)
    data = json_body(request, max_bytes=64 * 1024)
    agent = _text(data, "agent")
    git_range = git_range_from(_text(data, "git_range"))
    session_id = _text(data, "session_id")
    force = _flag(data, "force")
    try:
        result = prepare_reflection(
            workspace=workspace, agent=agent, git_range=git_range, force=force, session_id=session_id
        )
    except RepositoryError as exc:
        raise ApiError(str(exc), status=409, field="workspace") from exc
    return _answer(result)


@api_view(TokenScope.FULL)
def commit(request: HttpRequest, slug: str) -> JsonResponse:
    workspace = _workspace(slug)
    data = json_body(request, max_bytes=settings.REFLECT_MAX_COMMIT_BYTES)
    agent = _text(data, "agent")
    dry_run = _flag(data, "dry_run")
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
