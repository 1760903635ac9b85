"""Project-level API endpoints: who am I, and the workspaces agents have named."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from lessonboard.api import api_view
from lessonboard.models import TokenScope, Workspace


@api_view(TokenScope.INGEST, methods=("GET",))
def whoami(request: HttpRequest) -> JsonResponse:
    token = request.agent_token  # type: ignore[attr-defined]
    return JsonResponse({"name": token.name, "prefix": token.prefix, "scopes": token.scopes})


@api_view(TokenScope.FULL, methods=("GET",))
def workspaces(request: HttpRequest) -> JsonResponse:
    rows = Workspace.objects.values("slug", "name", "created_at")
    return JsonResponse({"workspaces": [{**row, "created_at": row["created_at"].isoformat()} for row in rows]})
