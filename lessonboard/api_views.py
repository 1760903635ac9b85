"""Project-level API endpoints: who am I, and the workspaces agents have named."""

from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest, JsonResponse
from pydantic import Field

from lessonboard.api import Described, api_view
from lessonboard.models import TokenScope, Workspace
from lessonboard.schemas import QueryInt, QueryModel, ResponseModel, Says, validated

PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


class Whoami(ResponseModel):
    name: str
    prefix: str
    scopes: list[str]


class WorkspacesQuery(QueryModel):
    after: str = Field("", description="the previous page's next")
    limit: Annotated[
        QueryInt,
        Field(ge=1, le=MAX_PAGE_SIZE),
        Says(f"'limit' must be an integer from 1 to {MAX_PAGE_SIZE}"),
    ] = PAGE_SIZE


class WorkspaceOut(ResponseModel):
    slug: str
    name: str
    created_at: str


class WorkspacesPage(ResponseModel):
    workspaces: list[WorkspaceOut]
    next: str | None = Field(description="the following page's after; null at the end")


@api_view(
    TokenScope.INGEST,
    methods=("GET",),
    describe=Described("The token's name, prefix and scopes", responses={200: Whoami}),
)
def whoami(request: HttpRequest) -> JsonResponse:
    token = request.agent_token  # type: ignore[attr-defined]
    return JsonResponse({"name": token.name, "prefix": token.prefix, "scopes": token.scopes})


@api_view(
    TokenScope.FULL,
    methods=("GET",),
    describe=Described(
        "Workspaces in slug order, a page at a time", query=WorkspacesQuery, responses={200: WorkspacesPage}
    ),
)
def workspaces(request: HttpRequest) -> JsonResponse:
    """``GET /api/v1/workspaces?after=<slug>&limit=<n>``: slug order, ``next`` names the following page's
    ``after``. A bound token sees its own workspaces only."""
    query = validated(WorkspacesQuery, request.GET.dict())
    limit = query.limit
    token = request.agent_token  # type: ignore[attr-defined]
    qs = Workspace.objects.order_by("slug")
    if token.workspaces:
        qs = qs.filter(slug__in=token.workspaces)
    after = query.after
    if after:
        qs = qs.filter(slug__gt=after)
    rows = list(qs.values("slug", "name", "created_at")[: limit + 1])
    next_after = rows[limit - 1]["slug"] if len(rows) > limit else None
    return JsonResponse(
        {
            "workspaces": [{**row, "created_at": row["created_at"].isoformat()} for row in rows[:limit]],
            "next": next_after,
        }
    )


class OpenApiDocument(ResponseModel):
    openapi: str
    info: dict[str, Any]
    paths: dict[str, Any]
    components: dict[str, Any]


@api_view(
    TokenScope.INGEST,
    methods=("GET",),
    describe=Described("This API's OpenAPI 3.1 document", responses={200: OpenApiDocument}),
)
def openapi_json(request: HttpRequest) -> JsonResponse:
    """The document is no secret, but the API's rule holds: any agent token (the ``ingest`` scope) reads
    it, as it reads ``whoami``."""
    from lessonboard.openapi import document  # walks the URL configuration, which imports this module

    return JsonResponse(document())
