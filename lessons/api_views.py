"""Lessons API for agents: add a manual lesson, retrieve lessons (with chatcli's memory block), and the rest of
the memory API: get, list, update, archive/restore, delete (a tombstone), share, history."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Annotated, Any, Literal

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from pydantic import Field

from lessonboard.api import ApiError, Described, api_view, check_workspace, json_body, named_workspace
from lessonboard.llm import limiter
from lessonboard.models import AgentToken, AuditEvent, TokenScope, Workspace
from lessonboard.pagination import decode_cursor, keyset_page
from lessonboard.schemas import AgentName, OptionalSlug, RequestModel, ResponseModel, Says, Tags, validated
from lessonboard.timeouts import statement_timeout
from lessons import retrieval
from lessons.language import clean_code
from lessons.models import Lesson, LessonScope, LessonStatus
from lessons.rendering import lesson_json, memory_block
from lessons.store import (
    LessonStateError,
    edit_lesson,
    latest_version,
    persist_lesson,
    persist_manual,
    record_use,
    set_scope,
    set_status,
)
from lessons.usage.log import record_retrieval
from lessons.usage.outcomes import OutcomeError, report_outcome

MAX_TEXT = 20_000
MAX_K = 50

Text = Annotated[str, Field(max_length=MAX_TEXT)]
RequiredText = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
Scope = Annotated[Literal["all", "workspace", "shared"], Says("'scope' must be all, workspace or shared")]
LessonId = Annotated[int, Field(ge=1), Says("'id' must be a positive integer lesson id")]
Reason = Annotated[str, Field(max_length=2000)]
HISTORY_PAGE = 100  # versions per history page, and what get with "history" returns


class _LessonCommon(RequestModel):
    workspace: OptionalSlug | None = None
    agent: AgentName | None = None


class ManualLessonBody(_LessonCommon):
    """chatcli's manual lesson (``/reflect <text>``): chosen when ``text`` is present."""

    text: RequiredText
    locale: Annotated[Literal["en", "pt", ""], Says("'locale' must be 'en' or 'pt'")] | None = None


class StructuredLessonBody(_LessonCommon):
    """A lesson in its parts."""

    situation: RequiredText
    correction: RequiredText
    mistake: Text | None = None
    trigger: Annotated[str, Field(max_length=50)] | None = Field(None, description='default "manual"')
    lang: Annotated[str, Field(max_length=16)] | None = Field(
        None, description='ISO 639-1 ("en", "pt", …); absent or empty: detected'
    )
    confidence: Annotated[float, Field(ge=0, le=1), Says("'confidence' must be a number between 0 and 1")] = 0.6
    tags: Tags | None = None


# A task of whitespace only has nothing to search for (every branch would come back empty and the answer's
# explanation would blame the embeddings).
TaskText = Annotated[str, Field(min_length=1, max_length=MAX_TEXT, pattern=r"\S"), Says("'task' must not be blank")]


class RetrieveBody(RequestModel):
    task: TaskText
    k: Annotated[int, Field(ge=1, le=MAX_K), Says(f"'k' must be an integer from 1 to {MAX_K}")] = 5
    hyde: bool | None = Field(
        None,
        description="absent: the server's LESSONBOARD_RETRIEVAL_HYDE; true is honoured only when that is on "
        "(HyDE calls the LLM in the request), false turns it off",
    )
    workspace: OptionalSlug | None = Field(None, description="required for a token bound to workspaces")
    scope: Scope = Field(
        "all",
        description="all: the workspace's lessons and the shared tier; workspace: its own only; shared: the "
        "shared tier only (docs/lessons.md#scopes)",
    )
    agent: AgentName | None = None
    agent_mode: Annotated[Literal["record", "only", "first"], Says("'agent_mode' must be record, only or first")] = (
        Field(
            "record",
            description="record: the agent is only logged; only: lessons that agent learned; first: those first",
        )
    )
    tags: Tags | None = None


class GetLessonBody(RequestModel):
    id: Annotated[int, Field(ge=1), Says("'id' must be a positive integer lesson id")]
    history: bool = Field(
        False, description=f"also the newest {HISTORY_PAGE} versions (action, actor, reason, snapshot); more: history"
    )


class ListLessonsBody(RequestModel):
    workspace: OptionalSlug | None = Field(None, description="required for a token bound to workspaces")
    scope: Scope = Field("all", description="as on retrieve: all, workspace or shared")
    status: Annotated[
        Literal["active", "archived", "superseded", "deleted", "any"],
        Says("'status' must be active, archived, superseded, deleted or any"),
    ] = Field("active", description="any: every status but deleted (the tombstones are listed by deleted)")
    tags: Tags | None = Field(None, description="lessons having all of these tags")
    agent: AgentName | None = None
    cursor: Annotated[str, Field(max_length=200)] | None = Field(None, description="next_cursor of the page before")
    limit: Annotated[int, Field(ge=1, le=200), Says("'limit' must be an integer from 1 to 200")] = 50


class UpdateLessonBody(RequestModel):
    """The fields to change (at least one); the lesson gets a new version."""

    id: LessonId
    situation: RequiredText | None = None
    mistake: Text | None = None
    correction: RequiredText | None = None
    tags: Tags | None = None
    trigger: Annotated[str, Field(min_length=1, max_length=50)] | None = None
    lang: Annotated[str, Field(max_length=16)] | None = Field(None, description="ISO 639-1; empty: detected")
    confidence: Annotated[float, Field(ge=0, le=1), Says("'confidence' must be a number between 0 and 1")] | None = None
    reason: Reason = ""


class LessonActionBody(RequestModel):
    id: LessonId
    reason: Reason = ""


class LessonScopeBody(RequestModel):
    id: LessonId
    scope: Annotated[Literal["shared", "workspace"], Says("'scope' must be shared or workspace")]
    reason: Reason = ""


class HistoryBody(RequestModel):
    id: LessonId
    limit: Annotated[int, Field(ge=1, le=1000), Says("'limit' must be an integer from 1 to 1000")] = HISTORY_PAGE
    before: Annotated[int, Field(ge=1), Says("'before' must be a positive version number")] | None = Field(
        None, description="only versions numbered below this (next_before of the page before)"
    )


class OutcomeBody(RequestModel):
    retrieval_id: Annotated[int, Field(ge=1), Says("'retrieval_id' must be a positive integer id")]
    success: Annotated[bool, Says("'success' must be true or false")]
    note: Annotated[str, Field(max_length=4000)] | None = None


class LessonOut(ResponseModel):
    id: int
    fact_id: str
    content: str
    category: str
    situation: str
    mistake: str
    correction: str
    tags: list[str]
    trigger: str
    lang: str
    confidence: float
    provenance: str
    access_count: int
    last_accessed: str
    occurrences: int = Field(description="how often its failure was reported (docs/queue.md#repeated-failures)")
    last_seen: str | None = None
    score: float
    status: str
    scope: str = Field(description="workspace (served in its workspace) or shared (served in every workspace)")
    workspace: str | None = Field(description="the workspace it belongs to (a shared lesson's: where it came from)")
    agent: str
    source_job_id: str | None
    created_at: str
    updated_at: str


class LessonCreated(ResponseModel):
    action: str = Field(description="created, superseded (201) or merged/reinforced (200)")
    message: str
    lesson: LessonOut


class RetrievedLesson(LessonOut):
    retrieval: dict[str, Any]


class Retrieval(ResponseModel):
    retrieval_id: int | None
    lessons: list[RetrievedLesson]
    memory_block: str
    reason: str | None
    explanation: dict[str, Any]


class LessonVersionOut(ResponseModel):
    number: int
    action: str
    actor: str
    reason: str
    source_job_id: str | None
    created_at: str
    snapshot: dict[str, Any]


class LessonWithHistory(ResponseModel):
    lesson: LessonOut
    versions: list[LessonVersionOut] | None = Field(None, description='with "history": true, newest first')
    next_before: int | None = Field(None, description="older versions exist: pass as before to the history endpoint")


class LessonChanged(ResponseModel):
    lesson: LessonOut
    changed: bool = Field(description="false when the lesson already was so (no new version)")
    version: int | None = Field(description="the number of the new version; null when nothing changed")


class LessonHistory(ResponseModel):
    lesson_id: int
    versions: list[LessonVersionOut] = Field(description="newest first, at most limit")
    next_before: int | None = Field(description="pass as before for the older versions; null when there are none")


class LessonPage(ResponseModel):
    lessons: list[LessonOut]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null on the last one")


class OutcomeRecorded(ResponseModel):
    retrieval_id: int
    success: bool | None
    lessons: list[int]


def _workspace(token: AgentToken, slug: str | None) -> Workspace | None:
    # A bound token may not write into the workspace-less pool (400 naming 'workspace').
    return named_workspace(token, slug)


def _lang(value: str | None) -> str:
    """The optional ``lang`` (``"en"``, ``"pt"``, another ISO 639-1 code); absent or empty = detected."""
    try:
        return clean_code(value or "")
    except ValueError as exc:
        raise ApiError(f"'lang' must be {exc}", field="lang") from exc


@api_view(
    TokenScope.FULL,
    describe=Described(
        "Add a manual lesson",
        body=(ManualLessonBody, StructuredLessonBody),
        responses={201: LessonCreated, 200: LessonCreated},
    ),
)
def create_lesson(request: HttpRequest) -> JsonResponse:
    """``{"text": …}`` → chatcli's manual lesson (``/reflect <text>``); or the structured shape
    ``{"situation", "mistake", "correction", "tags", "trigger", "lang"}``. Both take ``workspace``, ``agent``."""
    data = json_body(request, max_bytes=1024 * 1024)
    token = request.agent_token  # type: ignore[attr-defined]
    actor = f"token:{token.name}"
    # Validate everything first; then the action and its audit event commit together.
    if "text" in data:
        manual = validated(ManualLessonBody, data)
        text = manual.text.strip()
        if not text:
            raise ApiError("'text' is required", field="text")
        workspace = _workspace(token, manual.workspace)
        agent, locale = manual.agent or "", manual.locale or "en"

        def act() -> Any:
            return persist_manual(text, locale=locale, workspace=workspace, agent=agent, actor=actor)

    else:
        body = validated(StructuredLessonBody, data)
        lang = _lang(body.lang)
        workspace = _workspace(token, body.workspace)

        def act() -> Any:
            return persist_lesson(
                situation=body.situation,
                mistake=body.mistake or "",
                correction=body.correction,
                tags=[t.strip().lower() for t in body.tags or [] if t.strip()],
                trigger=body.trigger or "manual",
                workspace=workspace,
                agent=body.agent or "",
                confidence=body.confidence,
                provenance="manual",
                actor=actor,
                reason="manual lesson (API)",
                lang=lang,
            )

    with transaction.atomic():
        result = act()
        AuditEvent.record(
            "lesson.create",
            token=token,
            object_type="lesson",
            object_ids=[result.lesson.pk],
            result={"action": result.action},
        )
    return JsonResponse(
        {
            "action": result.action,
            "message": "lesson persisted to long-term memory (category=lesson)",
            "lesson": lesson_json(result.lesson),
        },
        status=201 if result.action in ("created", "superseded") else 200,
    )


@api_view(
    TokenScope.FULL,
    describe=Described(
        "Retrieve the lessons for a task",
        body=(RetrieveBody,),
        responses={200: Retrieval},
        links={
            200: {
                "report": {
                    "operationId": "api-outcome",
                    "requestBody": {"retrieval_id": "$response.body#/retrieval_id", "success": True},
                }
            }
        },
    ),
)
def retrieve(request: HttpRequest) -> JsonResponse:
    """``{task, k, workspace, tags, hyde}`` → ``{lessons, memory_block, reason, explanation}``; reinforces by use.
    A task is cut to ``RETRIEVAL_QUERY_MAX_CHARS`` (the explanation says so)."""
    body = validated(RetrieveBody, json_body(request, max_bytes=256 * 1024))
    task, k, slug, agent = body.task, body.k, body.workspace or "", body.agent or ""
    # The server decides whether a request may cost an LLM call: a request can turn HyDE off, never on.
    hyde = settings.RETRIEVAL_HYDE and body.hyde is not False
    token: AgentToken = request.agent_token  # type: ignore[attr-defined]
    if slug:
        check_workspace(token, slug)
    elif token.workspaces:
        # A bound token reads its own workspaces only; "every workspace" is not one of them.
        raise ApiError("'workspace' is required for a token bound to workspaces", field="workspace")
    tags = [t.strip().lower() for t in body.tags or [] if t.strip()]
    if body.agent_mode != "record" and not agent:
        raise ApiError(f"'agent' is required with agent_mode {body.agent_mode!r}", field="agent")
    only = agent if body.agent_mode == "only" else ""
    filters = retrieval.Filters(workspace=slug, tags=tags, scope=body.scope, agent=only)
    prefer = agent if body.agent_mode == "first" else ""
    with ExitStack() as stack:
        busy = ""
        if hyde:
            # HyDE's call is LLM work in a web thread: one of this process's places for it, and no wait
            # for a node slot (docs/api.md#reviews-when-busy); with none free the task is embedded as is.
            try:
                stack.enter_context(limiter.web_call())
            except limiter.WebShareFull as exc:
                hyde, busy = False, exc.message
        with statement_timeout("retrieve"):
            result = retrieval.search(task, k=k, filters=filters, hyde=hyde, prefer_agent=prefer)
    if busy:
        result.explanation["hyde"] = {"skipped": busy, "fallback": "query embedded as is"}
    elif body.hyde and not settings.RETRIEVAL_HYDE:
        result.explanation["hyde"] = {"refused": "LESSONBOARD_RETRIEVAL_HYDE is off on this server"}
    lessons: list[Lesson] = [hit.lesson for hit in result.hits]
    record_use([lesson.pk for lesson in lessons])
    logged = record_retrieval(task, result.hits, k=k, agent=agent or token.name, workspace=slug, token=token)
    return JsonResponse(
        {
            "retrieval_id": logged.pk if logged else None,
            "lessons": [{**_lesson_out(token, hit.lesson), "retrieval": hit.as_dict()} for hit in result.hits],
            "memory_block": memory_block(lessons),
            # Why "lessons" is empty (the floor: nothing known applies), null otherwise.
            "reason": result.reason or None,
            "explanation": {key: value for key, value in result.explanation.items() if key != "query"},
        }
    )


@api_view(
    TokenScope.FULL,
    describe=Described(
        "Get a lesson and, optionally, its version history",
        body=(GetLessonBody,),
        responses={200: LessonWithHistory},
        errors=(404,),
    ),
)
def get_lesson(request: HttpRequest) -> JsonResponse:
    """``{id, history}`` → ``{lesson, versions}``. A token bound to workspaces sees only the lessons of those
    workspaces: any other lesson (another workspace's, or one of no workspace) is 404, as a missing one is."""
    body = validated(GetLessonBody, json_body(request, max_bytes=8 * 1024))
    token: AgentToken = request.agent_token  # type: ignore[attr-defined]
    lesson = _readable(token, body.id)
    answer: dict[str, Any] = {"lesson": _lesson_out(token, lesson), "versions": None, "next_before": None}
    if body.history:
        answer["versions"], answer["next_before"] = _versions(lesson, token, limit=HISTORY_PAGE)
    return JsonResponse(answer)


def _versions(
    lesson: Lesson, token: AgentToken, *, limit: int, before: int | None = None
) -> tuple[list[dict[str, Any]], int | None]:
    """(up to ``limit`` of the lesson's versions numbered below ``before``, newest first; the ``before`` of the
    next page, or None). A token of another workspace (the lesson is shared) sees only the versions since it
    was last shared, with each actor reduced to its kind (``token``, ``user``): what the lesson said while it
    was its workspace's own, and who there changed it, stay that workspace's."""
    visible = lesson.versions.all()
    owner = _owned_by_token(token, lesson)
    if not owner:
        scopes = lesson.versions.order_by("-number").values_list("number", "snapshot__scope")
        private = next((number for number, scope in scopes if scope != LessonScope.SHARED), None)
        if private is not None:
            visible = visible.filter(number__gt=private)
    if before is not None:
        visible = visible.filter(number__lt=before)
    versions = list(visible.order_by("-number")[: limit + 1])
    next_before = versions[limit - 1].number if len(versions) > limit else None
    return [
        {
            "number": v.number,
            "action": v.action,
            "actor": v.actor if owner else v.actor.split(":", 1)[0],
            "reason": v.reason,
            "source_job_id": v.source_job_id if owner else None,
            "created_at": v.created_at.isoformat(),
            "snapshot": v.snapshot,
        }
        for v in versions[:limit]
    ], next_before


def _owned_by_token(token: AgentToken, lesson: Lesson) -> bool:
    return not token.workspaces or (lesson.workspace is not None and token.may_name(lesson.workspace.slug))


def _lesson_out(token: AgentToken, lesson: Lesson) -> dict[str, Any]:
    """``lesson_json`` as ``token`` may see it: of a shared lesson from another workspace, not the agent that
    learned it nor the job it came from (that workspace's own, as in its history)."""
    data = lesson_json(lesson)
    if not _owned_by_token(token, lesson):
        data.update(agent="", source_job_id=None)
    return data


def _readable(token: AgentToken, pk: int) -> Lesson:
    """The lesson, when the token may read it: a shared lesson, or one of the token's workspaces (any lesson
    for an unbound token). Any other is 404, as a missing one is: no answer tells that it exists."""
    lesson = Lesson.objects.select_related("workspace").filter(pk=pk).first()
    if lesson is None or not (lesson.scope == LessonScope.SHARED or _owned_by_token(token, lesson)):
        raise ApiError(f"no lesson {pk}", status=404, field="id")
    return lesson


def _changeable(token: AgentToken, pk: int) -> Lesson:
    """The lesson, when the token may change it: only its own workspace's may (a shared lesson too, which
    belongs to the workspace it came from). A shared lesson of another workspace is 403 (it is visible);
    anything else the token cannot see is 404."""
    lesson = _readable(token, pk)
    if not _owned_by_token(token, lesson):
        raise ApiError(
            f"lesson {pk} is shared from another workspace; only a token of that workspace may change it",
            status=403,
            field="id",
        )
    return lesson


def _changed(lesson: Lesson, changed: bool) -> JsonResponse:
    lesson = Lesson.objects.select_related("workspace").get(pk=lesson.pk)
    number = latest_version(lesson) if changed else None
    return JsonResponse({"lesson": lesson_json(lesson), "changed": changed, "version": number})


UPDATABLE = ("situation", "mistake", "correction", "tags", "trigger", "lang", "confidence")


@api_view(
    TokenScope.FULL,
    describe=Described(
        "Update a lesson (a new version)", body=(UpdateLessonBody,), responses={200: LessonChanged}, errors=(404, 409)
    ),
)
def update_lesson(request: HttpRequest) -> JsonResponse:
    """``{id, situation, mistake, correction, tags, trigger, lang, confidence, reason}`` → the lesson after
    the change, as a new version (the pages' edit); ``changed: false`` and no version when every value given
    is the lesson's already. A deleted lesson is restored first (409)."""
    body = validated(UpdateLessonBody, json_body(request, max_bytes=1024 * 1024))
    token: AgentToken = request.agent_token  # type: ignore[attr-defined]
    given = {name: getattr(body, name) for name in UPDATABLE if getattr(body, name) is not None}
    if not given:
        raise ApiError(f"nothing to change: give at least one of {', '.join(UPDATABLE)}", field="body")
    if "lang" in given:
        given["lang"] = _lang(given["lang"])
    if "tags" in given:
        given["tags"] = [t.strip().lower() for t in given["tags"] if t.strip()]
    lesson = _changeable(token, body.id)
    latest = latest_version(lesson)
    with transaction.atomic(), _conflict():  # the action and its audit event commit together
        edit_lesson(lesson, actor=f"token:{token.name}", reason=body.reason, **given)
        if latest_version(lesson) == latest:  # every value given was the lesson's already
            return _changed(lesson, False)
        AuditEvent.record(
            "lesson.edit",
            token=token,
            object_type="lesson",
            object_ids=[lesson.pk],
            reason=body.reason,
            result={"fields": sorted(given)},
        )
    return _changed(lesson, True)


@contextmanager
def _conflict() -> Iterator[None]:
    """A change the lesson's status does not allow (``store.LessonStateError``) is a 409 naming ``id``."""
    try:
        yield
    except LessonStateError as exc:
        raise ApiError(str(exc), status=409, field="id") from exc


def _status_action(request: HttpRequest, status: str, event: str) -> JsonResponse:
    body = validated(LessonActionBody, json_body(request, max_bytes=16 * 1024))
    token: AgentToken = request.agent_token  # type: ignore[attr-defined]
    lesson = _changeable(token, body.id)
    if lesson.status == status:
        return _changed(lesson, False)
    with transaction.atomic(), _conflict():  # the action and its audit event commit together
        set_status(lesson, status, actor=f"token:{token.name}", reason=body.reason)
        AuditEvent.record(
            event,
            token=token,
            object_type="lesson",
            object_ids=[lesson.pk],
            reason=body.reason,
            result={"from": lesson.status, "to": status},
        )
    return _changed(lesson, True)


@api_view(
    TokenScope.FULL,
    describe=Described(
        "Archive a lesson (no longer served)",
        body=(LessonActionBody,),
        responses={200: LessonChanged},
        errors=(404, 409),
    ),
)
def archive_lesson(request: HttpRequest) -> JsonResponse:
    """``{id, reason}``: an active (or superseded) lesson is archived, a new version; a deleted one is 409."""
    return _status_action(request, LessonStatus.ARCHIVED, "lesson.archive")


@api_view(
    TokenScope.FULL,
    describe=Described(
        "Restore an archived, superseded or deleted lesson (served again)",
        body=(LessonActionBody,),
        responses={200: LessonChanged},
        errors=(404,),
    ),
)
def restore_lesson(request: HttpRequest) -> JsonResponse:
    """``{id, reason}``: the lesson is active again, a new version."""
    return _status_action(request, LessonStatus.ACTIVE, "lesson.unarchive")


@api_view(
    TokenScope.FULL,
    describe=Described(
        "Delete a lesson (a tombstone)", body=(LessonActionBody,), responses={200: LessonChanged}, errors=(404,)
    ),
)
def delete_lesson(request: HttpRequest) -> JsonResponse:
    """``{id, reason}``: the lesson becomes a tombstone (status ``deleted``): never served or listed again
    unless asked for, tombstoned in chatcli's export, its history kept; ``restore`` brings it back."""
    return _status_action(request, LessonStatus.DELETED, "lesson.delete")


@api_view(
    TokenScope.FULL,
    describe=Described(
        "Share a lesson with every workspace, or take it back to its own",
        body=(LessonScopeBody,),
        responses={200: LessonChanged},
        errors=(404, 409),
    ),
)
def scope_lesson(request: HttpRequest) -> JsonResponse:
    """``{id, scope, reason}``: ``shared`` puts the lesson in the team-wide tier (every workspace's retrieve
    finds it), ``workspace`` takes it back to its own workspace's. Only a token that may name the lesson's
    workspace may do either (docs/lessons.md#scopes). A deleted lesson is restored first (409)."""
    body = validated(LessonScopeBody, json_body(request, max_bytes=16 * 1024))
    token: AgentToken = request.agent_token  # type: ignore[attr-defined]
    lesson = _changeable(token, body.id)
    if lesson.scope == body.scope:
        return _changed(lesson, False)
    with transaction.atomic(), _conflict():  # the action and its audit event commit together
        set_scope(lesson, body.scope, actor=f"token:{token.name}", reason=body.reason)
        AuditEvent.record(
            "lesson.share" if body.scope == LessonScope.SHARED else "lesson.unshare",
            token=token,
            object_type="lesson",
            object_ids=[lesson.pk],
            reason=body.reason,
        )
    return _changed(lesson, True)


@api_view(
    TokenScope.FULL,
    describe=Described(
        "A lesson's history: its versions, a page at a time",
        body=(HistoryBody,),
        responses={200: LessonHistory},
        errors=(404,),
    ),
)
def lesson_history(request: HttpRequest) -> JsonResponse:
    """``{id, limit, before}`` → ``{lesson_id, versions, next_before}``: up to ``limit`` (100) versions
    numbered below ``before``, newest first (action, actor, reason and the fields after it); ``next_before``
    pages to the older ones."""
    body = validated(HistoryBody, json_body(request, max_bytes=8 * 1024))
    token: AgentToken = request.agent_token  # type: ignore[attr-defined]
    lesson = _readable(token, body.id)
    versions, next_before = _versions(lesson, token, limit=body.limit, before=body.before)
    return JsonResponse({"lesson_id": lesson.pk, "versions": versions, "next_before": next_before})


@api_view(
    TokenScope.FULL,
    describe=Described(
        "List lessons, newest first, a page at a time", body=(ListLessonsBody,), responses={200: LessonPage}
    ),
)
def list_lessons(request: HttpRequest) -> JsonResponse:
    """``{workspace, status, tags, agent, cursor, limit}`` → ``{lessons, next_cursor}`` (keyset pages on
    ``created_at``, ``id``). A token bound to workspaces must name one of them, as on retrieve."""
    body = validated(ListLessonsBody, json_body(request, max_bytes=16 * 1024))
    token: AgentToken = request.agent_token  # type: ignore[attr-defined]
    slug = body.workspace or ""
    if slug:
        check_workspace(token, slug)
    elif token.workspaces:
        raise ApiError("'workspace' is required for a token bound to workspaces", field="workspace")
    tags = [t.strip().lower() for t in body.tags or [] if t.strip()]
    status = "" if body.status == "any" else body.status
    filters = retrieval.Filters(workspace=slug, tags=tags, agent=body.agent or "", status=status, scope=body.scope)
    if body.cursor and decode_cursor(body.cursor) is None:
        raise ApiError("'cursor' is not a next_cursor this endpoint gave", field="cursor")
    queryset = filters.apply(Lesson.objects.select_related("workspace"))
    page = keyset_page(queryset, cursor=body.cursor, size=body.limit, time_field="created_at")
    lessons = [_lesson_out(token, lesson) for lesson in page.rows]
    return JsonResponse({"lessons": lessons, "next_cursor": page.next_cursor})


@api_view(
    TokenScope.INGEST,
    describe=Described(
        "Report how the task of a retrieval went", body=(OutcomeBody,), responses={200: OutcomeRecorded}, errors=(404,)
    ),
)
def outcome(request: HttpRequest) -> JsonResponse:
    """``{retrieval_id, success, note}`` → how the task of that retrieval went; updates the usefulness
    of every lesson it served. A failure can also be reported as a trigger carrying ``retrieval_id``."""
    body = validated(OutcomeBody, json_body(request, max_bytes=64 * 1024))
    try:
        token: AgentToken = request.agent_token  # type: ignore[attr-defined]
        row = report_outcome(body.retrieval_id, success=body.success, note=body.note or "", token=token)
    except OutcomeError as exc:
        raise ApiError(exc.message, status=exc.status, field=exc.field) from exc
    served = list(row.served.values_list("lesson_id", flat=True))
    return JsonResponse({"retrieval_id": row.pk, "success": row.success, "lessons": served})
