"""Every action that changes data leaves an AuditEvent (docs/security.md#audit-log).

The lists are generated: every URL name from the URL configuration, every management command of the
project's apps, every admin action of every registered ModelAdmin. Each must be classified here — read
only, a write exercised below (it must change a row *and* leave an audit event), a write whose audit
event another named test asserts, or a high-volume agent record that is its own log (with the reason) —
so a new URL, command or admin action fails this file until someone says which it is.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.core.management import call_command, get_commands
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from lessonboard.models import AgentToken, AuditEvent, Workspace
from lessonboard.roles import ADMIN
from lessonboard.tokens import issue_token
from tests.factories import UserFactory, WorkspaceFactory
from tests.support.clients import ApiClient

pytestmark = pytest.mark.django_db

PROJECT_APPS = ("lessonboard", "lessonq", "lessons", "refine")

# --- URLs ---------------------------------------------------------------------------------------------------
READ_ONLY_URLS = {
    "queue:index", "queue:counts", "queue:groups", "queue:job", "queue:job-text", "queue:bulk-preview", "queue:bulk",
    "overview", "overview-charts", "inbox", "quality-settings", "healthz", "readyz", "metrics",
    "api-whoami", "api-workspaces", "api-openapi", "audit:list",
    "lessons:search", "lessons:gaps", "lessons:impact", "lessons:detail",
    "refine:runs", "refine:run", "refine:api-run",
    "reflect:workspaces", "reflect:workspace", "reflect:api-manifest", "reflect:api-prompts",
    "reviews:queue", "reviews:decisions", "reviews:gates", "reviews:proposal", "reviews:api-memory",
    "lessons:api-get", "lessons:api-list", "lessons:api-history", "api-operator-dlq", "running-now", "schedules", "usage", "favicon",
}  # fmt: skip
# Records that are their own log, written at agent volume: the row carries who (token), what and when.
OWN_RECORD_URLS = {
    "queue:api-triggers": "a job row (token, workspace, time) and its WAL record; thousands a second",
    "lessons:api-retrieve": "the retrieval log row (token, workspace, task) is the record",
    "lessons:api-outcome": "sets the outcome on the caller's own retrieval log row",
    "refine:api-refine": "the refine run row (token, workspace) is the record",
    "reflect:api-prepare": "writes a manifest and a ReflectEvent (the workspace's reflection log)",
    "reviews:release": "gives back the caller's own hold on a proposal (no decision)",
    "login": "django-axes and the session; lockouts and unlocks are audited (auth.lockout/auth.unlock)",
    "logout": "ends the caller's own session",
    "mcp": "each tool is one of the API endpoints above, run in-process with the same audit",
}
# Writes whose audit event another test asserts (file: the action it checks).
AUDITED_ELSEWHERE = {
    "queue:propose-lesson": "tests/triage/test_propose_lesson.py: queue.propose_lesson",
    "queue:retry": "tests/triage/test_actions.py: queue.dlq_retry",
    "queue:purge": "tests/triage/test_actions.py: queue.dlq_purge",
    "queue:retry-now": "lessonq/dlq.py retry_now records queue.retry_now (tests/operator/test_rough_edges.py)",
    "queue:bulk-start": "tests/triage/test_bulk.py: queue.bulk",
    "queue:bulk-cancel": "tests/triage/test_bulk.py: queue.bulk_cancel",
    "ping-workers": "tests/lessonboard/test_audit_page.py: workers.ping",
    "inbox-act": "tests/operator/test_dates.py: inbox.dismiss",
    "refine:use-pass": "tests/refine/test_pages.py: refine.choose_output",
    "refine:propose-lesson": "refine/runs.py propose_lesson records refine.propose_lesson",
    "reflect:workspace-settings": "lessons/reflect/repository.py attach records reflect.workspace.attach",
    "reflect:proposal-approve": "tests/reflect/test_gate.py: reflect.proposal.approve",
    "reflect:proposal-reject": "tests/reflect/test_gate.py: reflect.proposal.reject",
    "reflect:api-commit": "lessons/reflect/commit.py records reflect.commit / reflect.stage",
    "reviews:bulk": "tests/review/test_batch.py: review.approve_batch",
    "reviews:approve": "tests/review/test_views.py: review.approve",
    "reviews:reject": "tests/review/test_views.py: review.reject",
    "reviews:undo": "tests/review/test_views.py: review.undo",
    "reviews:gates-save": "tests/review/test_workspace_gates.py: review.gates",
    "queue-pause": "tests/operator/test_second_day.py: queue.pause",
    "queue-resume": "lessonboard/pauses.py resume records queue.resume",
    "job-cancel": "tests/operator/test_running_worker.py: queue.cancel",
    "api-operator-retry": "tests/operator/test_operator_api.py: queue.dlq_retry",
    "api-operator-purge": "tests/operator/test_operator_api.py: queue.dlq_purge",
    "api-operator-dlq-bulk": "tests/operator/test_operator_api.py: queue.bulk_start",
    "api-operator-pause": "tests/operator/test_operator_api.py: queue.pause",
    "api-operator-resume": "lessonboard/pauses.py resume records queue.resume",
    "api-operator-proposal-approve": "tests/operator/test_proposal_api.py: review.approve",
    "api-operator-proposal-reject": "tests/operator/test_proposal_api.py: review.reject",
}


def _names(patterns: list[Any], namespace: str = "") -> list[str]:
    names: list[str] = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            if pattern.namespace == "admin":
                continue  # the admin: walked through its ModelAdmins below
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            names += _names(pattern.url_patterns, inner)
        elif isinstance(pattern, URLPattern):
            names.append(f"{namespace}{pattern.name or pattern.pattern}")
    return names


def row_counts() -> dict[str, int]:
    skip = ("sessions.Session", "axes.AccessAttempt", "axes.AccessLog", "lessonboard.AuditEvent", "admin.LogEntry")
    return {
        model._meta.label: model._default_manager.count()
        for model in apps.get_models()
        if model._meta.managed and model._meta.label not in skip
    }


@pytest.fixture
def world(settings: Any, tmp_path: Path) -> dict[str, Any]:
    base = tmp_path / "lessonq"
    for sub in ("wal", "dlq", "quarantine", "expired"):
        (base / sub).mkdir(parents=True)
    settings.LESSONQ_BASE_DIR = base
    settings.NODE = "q3" + uuid.uuid4().hex[:8]
    settings.LESSONQ_QUEUE = f"lessonq.{settings.NODE}"
    settings.EMBEDDING_PROVIDER = "none"
    from lessons.store import edit_lesson, persist_lesson

    lesson = persist_lesson(situation="walk one", mistake="", correction="c one", tags=[], trigger="manual").lesson
    other = persist_lesson(situation="walk two zebra", mistake="", correction="c two", tags=[], trigger="m").lesson
    edit_lesson(lesson, correction="c one edited", actor="test")
    admin_user = UserFactory(username="walker", role=ADMIN)
    page = Client()
    page.force_login(admin_user)
    return {"lesson": lesson, "other": other, "page": page, "api": ApiClient(issue_token("w", ["full"]).plaintext)}


def _gap(world: dict[str, Any]) -> Any:
    from lessons.usage.models import Retrieval

    row = Retrieval.objects.create(task="nothing known", agent="a", workspace="", k=5, gap=True)
    return world["page"].post("/lessons/gaps/dismiss", {"ids": str(row.pk)})


def _archived_then(world: dict[str, Any], path: str) -> Any:
    from lessons.store import set_status

    set_status(world["lesson"], "archived", actor="test")
    return world["api"].post(path, {"id": world["lesson"].pk})


WRITES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "lessons:api-create": lambda w: w["api"].post("/api/v1/lessons", {"text": "A walked lesson."}),
    "lessons:create": lambda w: w["page"].post("/lessons/new", {"text": "A page lesson."}),
    "lessons:edit": lambda w: w["page"].post(
        f"/lessons/{w['lesson'].pk}/edit",
        {"situation": "walk one", "correction": "edited again", "confidence": "0.6", "mistake": "", "tags": ""},
    ),
    "lessons:status": lambda w: w["page"].post(f"/lessons/{w['lesson'].pk}/status", {"status": "archived"}),
    "lessons:scope": lambda w: w["page"].post(f"/lessons/{w['lesson'].pk}/scope", {"scope": "shared"}),
    "lessons:api-update": lambda w: w["api"].post(
        "/api/v1/lessons/update", {"id": w["lesson"].pk, "correction": "walked edit"}
    ),
    "lessons:api-archive": lambda w: w["api"].post("/api/v1/lessons/archive", {"id": w["lesson"].pk}),
    "lessons:api-restore": lambda w: _archived_then(w, "/api/v1/lessons/restore"),
    "lessons:api-delete": lambda w: w["api"].post("/api/v1/lessons/delete", {"id": w["lesson"].pk}),
    "lessons:api-scope": lambda w: w["api"].post("/api/v1/lessons/scope", {"id": w["lesson"].pk, "scope": "shared"}),
    "lessons:restore": lambda w: w["page"].post(f"/lessons/{w['lesson'].pk}/restore/1"),
    "lessons:merge": lambda w: w["page"].post(
        "/lessons/merge", {"keep": w["lesson"].pk, "other": w["other"].pk, "reason": "same"}
    ),
    "lessons:gap-dismiss": _gap,
    "refine:modes": lambda w: w["page"].post("/refine/modes/", {"agent": "coder", "mode": "off"}),
    "refine:api-mode": lambda w: w["api"].post("/api/v1/refine/mode", {"agent": "coder", "mode": "on"}),
    "reviews:api-reviews": lambda w: w["api"].post("/api/v1/reviews", {"summary": "", "workspace": "walk"}),
}


def test_every_url_is_classified() -> None:
    names = set(_names(get_resolver().url_patterns))
    classified = set(READ_ONLY_URLS) | set(OWN_RECORD_URLS) | set(AUDITED_ELSEWHERE) | set(WRITES)
    assert sorted(names - classified) == [], "classify each new URL here: read only, exercised or audited elsewhere"
    assert sorted(classified - names) == [], "a classified URL is gone: drop it here"


@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_write_url_leaves_an_audit_event(name: str, world: dict[str, Any]) -> None:
    before, events = row_counts(), AuditEvent.objects.count()
    response = WRITES[name](world)
    assert response.status_code < 400, (name, response.status_code, response.content[:300])
    changed = {label for label, count in row_counts().items() if count != before[label]}
    audited = AuditEvent.objects.count() > events
    if name == "reviews:api-reviews":
        changed = changed or {"lessons.ReviewRun"}  # an empty summary still records its run
    assert audited, f"{name} changed {sorted(changed) or 'rows in place'} and left no audit event"


# --- management commands --------------------------------------------------------------------------------------
READ_ONLY_COMMANDS = {"serve": "runs the servers"}
COMMAND_WRITES: dict[str, Callable[[Path], None]] = {
    "create_user": lambda tmp: call_command("create_user", "walk-user", "--role", "viewer", stdout=io.StringIO()),
    "create_agent_token": lambda tmp: call_command("create_agent_token", "walk-token", stdout=io.StringIO()),
    "reflect": lambda tmp: call_command("reflect", "Pin", "the", "helm", "chart", "version", stdout=io.StringIO()),
    "lessonq": lambda tmp: call_command("lessonq", "import", str(_chatcli_dir(tmp)), stdout=io.StringIO()),
    "lessons": lambda tmp: call_command("lessons", "export", str(tmp / "out.jsonl"), stdout=io.StringIO()),
}
COMMANDS_AUDITED_ELSEWHERE = {
    "demo": "seeds the demo workspace through the audited store and queue paths (tests/operator)",
    "reflect_docs": "attach/commit record reflect.workspace.attach / reflect.commit (lessons/reflect/)",
}


def _chatcli_dir(tmp: Path) -> Path:
    base = tmp / "chatcli"
    (base / "wal").mkdir(parents=True, exist_ok=True)
    (base / "dlq").mkdir(exist_ok=True)
    return base


def test_every_project_command_is_classified() -> None:
    ours = {name for name, app in get_commands().items() if app.split(".")[0] in PROJECT_APPS}
    classified = set(READ_ONLY_COMMANDS) | set(COMMAND_WRITES) | set(COMMANDS_AUDITED_ELSEWHERE)
    assert sorted(ours - classified) == [], "classify each new management command here"


@pytest.mark.parametrize("name", sorted(COMMAND_WRITES))
def test_a_command_that_writes_leaves_an_audit_event(name: str, world: dict[str, Any], tmp_path: Path) -> None:
    events = AuditEvent.objects.count()
    COMMAND_WRITES[name](tmp_path)
    assert AuditEvent.objects.count() > events, f"manage.py {name} left no audit event"


def test_lessonq_adopt_is_audited(world: dict[str, Any]) -> None:
    call_command("lessonq", "adopt", "some-dead-node", "--now", stdout=io.StringIO())
    event = AuditEvent.objects.get(action="queue.adopt")
    assert event.object_ids == ["lessonq.some-dead-node"]


# --- the admin ------------------------------------------------------------------------------------------------
# Custom admin actions (Django's delete_selected goes through log_deletions, audited for every model).
AUDITED_ADMIN_ACTIONS = {
    "revoke": "token.revoke (lessonboard/admin.py)",
    "unlock_selected": "auth.unlock (lessonboard/login.py)",
    "archive": "lesson.archive (lessons/admin.py; test_admin_edits_and_deletes_are_audited)",
    "queue_embedding": "lesson.reembed (lessons/admin.py)",
}


def test_every_custom_admin_action_is_classified(rf: Any) -> None:
    request = rf.get("/admin/")
    request.user = UserFactory(username="admin-walk", role=ADMIN)
    found = set()
    for model_admin in admin.site._registry.values():
        found |= {name for name in model_admin.get_actions(request) if name != "delete_selected"}
    assert sorted(found - set(AUDITED_ADMIN_ACTIONS)) == [], "say how each new admin action is audited"


def test_admin_edits_and_deletes_are_audited(admin_user: Any) -> None:
    from lessons.store import persist_lesson

    client = Client()
    client.force_login(admin_user)
    token = issue_token("scoped", ["ingest"]).token
    edited = client.post(
        f"/admin/lessonboard/agenttoken/{token.pk}/change/",
        {"name": "scoped", "scopes": ["ingest", "full"], "workspaces": "[]"},
    )
    assert edited.status_code == 302
    assert set(AgentToken.objects.get(pk=token.pk).scopes) == {"ingest", "full"}
    change = AuditEvent.objects.get(action="admin.change")
    assert (change.object_type, change.object_ids, change.actor_user) == (
        "lessonboard.agenttoken",
        [str(token.pk)],
        admin_user,
    )
    assert "Scopes" in str(change.result["change"]) or "scopes" in str(change.result["change"])

    kept = persist_lesson(situation="kept", mistake="", correction="k", tags=[], trigger="manual").lesson
    archived = client.post("/admin/lessons/lesson/", {"action": "archive", "_selected_action": [kept.pk]})
    assert archived.status_code == 302
    assert AuditEvent.objects.get(action="lesson.archive").object_ids == [str(kept.pk)]

    workspace = WorkspaceFactory(slug="doomed")
    lesson = persist_lesson(situation="s", mistake="", correction="c", tags=[], trigger="manual").lesson
    assert client.post(f"/admin/lessonboard/workspace/{workspace.pk}/delete/", {"post": "yes"}).status_code == 302
    bulk = client.post(
        "/admin/lessons/lesson/", {"action": "delete_selected", "_selected_action": [lesson.pk], "post": "yes"}
    )
    assert bulk.status_code == 302
    assert not Workspace.objects.filter(pk=workspace.pk).exists()
    deletes = {e.object_type: e.object_ids for e in AuditEvent.objects.filter(action="admin.delete")}
    assert deletes == {"lessonboard.workspace": [str(workspace.pk)], "lessons.lesson": [str(lesson.pk)]}
