"""Every URL the project serves, probed by everyone who must be refused (docs/security.md#permission-matrix).

The list of endpoints is read from the URL configuration, and what each one needs from the view itself
(``require_perm`` and ``api_view`` mark their wrappers), so a new endpoint is probed without anyone
adding it here. An endpoint that declares neither, and is not in ``PUBLIC``, fails the suite.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.apps import apps
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from lessonboard.models import TokenScope
from lessonboard.roles import ADMIN, ROLE_PERMISSIONS, ROLES
from lessonboard.tokens import issue_token
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

# Reachable without a login or a token, on purpose. /metrics checks its own bearer token (tested in
# test_security.py); the others are the login flow, the probes and the icon browsers ask for.
PUBLIC = {"accounts/login/", "accounts/logout/", "healthz", "readyz", "metrics", "favicon.ico"}
METHODS = ("GET", "POST")


@dataclass(frozen=True)
class Endpoint:
    route: str
    permissions: frozenset[str]
    scope: str | None

    @property
    def url(self) -> str:
        def value(match: re.Match[str]) -> str:
            converter = match.group(1)
            return {"int": "1", "uuid": str(uuid.UUID(int=1))}.get(converter, "probe")

        return "/" + re.sub(r"<(?:(\w+):)?\w+>", value, self.route)


def _walk(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, Callable[..., Any]]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern.callback


def endpoints() -> list[Endpoint]:
    found = []
    for route, callback in _walk(get_resolver().url_patterns):
        if route.startswith("admin/"):
            continue  # Django's admin: staff only, its own checks (probed in test_the_admin_is_staff_only)
        permissions: set[str] = set()
        scope = None
        view: Any = callback
        while view is not None:
            if hasattr(view, "required_permission"):
                permissions.add(view.required_permission)
            scope = scope or getattr(view, "required_scope", None)
            view = getattr(view, "__wrapped__", None)
        found.append(Endpoint(route, frozenset(permissions), scope))
    return found


ENDPOINTS = endpoints()
PAGES = [e for e in ENDPOINTS if e.scope is None and e.route not in PUBLIC]
APIS = [e for e in ENDPOINTS if e.scope is not None]


def row_counts() -> dict[str, int]:
    """Rows per table of every managed model: nothing a refused request does may change one."""
    from django.db import connection

    models = [
        m
        for m in apps.get_models()
        if m._meta.managed and m._meta.label not in ("sessions.Session", "axes.AccessAttempt")
    ]
    # One round trip for every table (a COUNT per model was ~60 queries, twice per probed endpoint).
    sql = " UNION ALL ".join(f"SELECT %s, count(*) FROM {connection.ops.quote_name(m._meta.db_table)}" for m in models)
    with connection.cursor() as cursor:
        cursor.execute(sql, [m._meta.label for m in models])
        return dict(cursor.fetchall())


def test_every_endpoint_declares_who_may_use_it() -> None:
    undeclared = [e.route for e in ENDPOINTS if e.route not in PUBLIC and not e.permissions and e.scope is None]
    assert undeclared == [], "pages need require_perm / view_required, API views api_view(scope)"
    assert len(PAGES) > 20 and len(APIS) > 8  # the walk found the apps' URLs, not an empty list
    assert {e.route for e in ENDPOINTS} >= PUBLIC


@pytest.mark.parametrize("endpoint", PAGES, ids=lambda e: e.route)
def test_a_page_refuses_anonymous_an_api_token_and_every_role_below_the_one_needed(endpoint: Endpoint) -> None:
    before = row_counts()
    token = issue_token("matrix", ["full"]).plaintext
    for method in METHODS:
        anonymous = Client().generic(method, endpoint.url)
        assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"], (method, "anonymous")
        with_token = Client().generic(method, endpoint.url, headers={"Authorization": f"Bearer {token}"})
        assert with_token.status_code == 302 and "/accounts/login/" in with_token["Location"], (method, "token")

    below = [role for role in ROLES if not endpoint.permissions <= set(ROLE_PERMISSIONS[role])]
    assert ADMIN not in below
    for role in below:
        client = Client()
        client.force_login(UserFactory(username=f"probe-{role}", role=role))
        for method in METHODS:
            response = client.generic(method, endpoint.url)
            # 405 is a refusal too: a method check before the permission check (require_POST outermost).
            assert response.status_code in (403, 405), (method, role, response.status_code)
    after = row_counts()
    after["lessonboard.AgentToken"] -= 1
    after["auth.User"] -= len(below)
    assert after == before


@pytest.mark.parametrize("endpoint", APIS, ids=lambda e: e.route)
def test_an_api_endpoint_refuses_no_token_a_session_and_a_token_without_its_scope(endpoint: Endpoint) -> None:
    before = row_counts()
    session = Client()
    session.force_login(UserFactory(username="probe-admin", role=ADMIN))
    weaker = {
        TokenScope.FULL: [TokenScope.INGEST, TokenScope.METRICS, TokenScope.OPERATOR],
        TokenScope.INGEST: [TokenScope.METRICS, TokenScope.OPERATOR],
        TokenScope.OPERATOR: [TokenScope.INGEST, TokenScope.METRICS],
    }[TokenScope(endpoint.scope)]
    tokens = [issue_token(f"probe-{scope}", [scope]).plaintext for scope in weaker]
    for method in METHODS:
        for client in (Client(), session):
            response = client.generic(method, endpoint.url, "{}", content_type="application/json")
            assert response.status_code == 401, (method, response.status_code)
            assert response.json()["error"]
        for token in tokens:
            response = Client().generic(
                method,
                endpoint.url,
                "{}",
                content_type="application/json",
                headers={"Authorization": f"Bearer {token}"},
            )
            assert response.status_code == 403, (method, token.split("_")[1], response.status_code)
    after = row_counts()
    after["lessonboard.AgentToken"] -= len(tokens)
    after["auth.User"] -= 1
    assert after == before


def test_the_admin_is_staff_only() -> None:
    for role in ROLES:
        if role == ADMIN:
            continue
        client = Client()
        client.force_login(UserFactory(username=f"probe-{role}", role=role))
        for url in ("/admin/", "/admin/lessonboard/agenttoken/", "/admin/axes/accessattempt/"):
            response = client.get(url)
            assert response.status_code == 302 and "/admin/login/" in response["Location"], (role, url)
    anonymous = Client().get("/admin/lessonboard/agenttoken/")
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]


# --- two workspaces and a token bound to one (docs/security.md#tenancy-and-the-gate) ------------------------
SECRET = "SECRET-OF-B"


@pytest.fixture
def two_workspaces(settings: Any, tmp_path: Any) -> dict[str, Any]:
    """ws-a and ws-b, ws-b holding a lesson, a retrieval, a refine run and a proposal that mention SECRET."""
    from lessonboard.models import Workspace
    from lessons.review.models import Proposal, ReviewRun
    from lessons.store import persist_lesson
    from lessons.usage.models import Retrieval
    from refine.models import RefineRun

    base = tmp_path / "lessonq"
    for sub in ("wal", "dlq", "quarantine", "expired"):
        (base / sub).mkdir(parents=True)
    settings.LESSONQ_BASE_DIR = base
    settings.NODE = "q3" + uuid.uuid4().hex[:8]
    settings.LESSONQ_QUEUE = f"lessonq.{settings.NODE}"
    settings.EMBEDDING_PROVIDER = "none"
    settings.REFINE_ENABLED = False
    Workspace.objects.create(slug="ws-a", name="ws-a")
    ws_b = Workspace.objects.create(slug="ws-b", name="ws-b")
    lesson = persist_lesson(
        situation=f"deploy {SECRET}", mistake="", correction=SECRET, tags=[], trigger="m", workspace=ws_b
    ).lesson
    retrieval = Retrieval.objects.create(task=f"deploy {SECRET}", agent="coder", workspace="ws-b", k=5)
    run = RefineRun.objects.create(
        task=SECRET, original_draft=SECRET, final_output=SECRET, status="done", agent="coder", workspace=ws_b
    )
    review = ReviewRun.objects.create(workspace=ws_b, summary=SECRET)
    Proposal.objects.create(
        run=review, workspace=ws_b, target="memory", op="add", content=SECRET, score=0.9, status="pending",
        auto_approve=True,
    )  # fmt: skip
    return {"run": run.pk, "retrieval": retrieval.pk, "lesson": lesson.pk}


def _probe(endpoint: Endpoint, ids: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The endpoint's URL pointed at ws-b's objects, and a body/query naming ws-b with every field any
    endpoint needs (the models ignore the others)."""

    def value(match: re.Match[str]) -> str:
        converter, name = match.group(1), match.group(2)
        if name == "slug":
            return "ws-b"
        if name == "target":
            return "memory"
        if converter == "int":
            return str(ids["run"])
        return "probe"

    url = "/" + re.sub(r"<(?:(\w+):)?(\w+)>", value, endpoint.route)
    body = {
        "workspace": "ws-b", "task": f"deploy {SECRET}", "error": "boom", "text": "x", "summary": "s",
        "agent": "coder", "mode": "off", "draft": "d", "retrieval_id": ids["retrieval"], "success": False,
        "situation": "s", "correction": "c", "files": {},
        # The memory API's lesson endpoints (get, update, archive, restore, delete, scope, history) aim at
        # ws-b's lesson; "scope" as the scope endpoint takes it (retrieve and list read it too).
        "id": ids["lesson"], "scope": "shared", "history": True,
    }  # fmt: skip
    return url, body


@pytest.mark.parametrize("endpoint", APIS, ids=lambda e: e.route)
def test_a_bound_token_cannot_read_or_change_another_workspace(endpoint: Endpoint, two_workspaces: Any) -> None:
    """Generated over every API endpoint: naming ws-b (body, query, path) or its objects' ids with a token
    bound to ws-a is refused or answers nothing of ws-b, and changes no row."""
    import json

    token = issue_token("bound-a", [TokenScope.FULL, TokenScope.INGEST], workspaces=["ws-a"]).plaintext
    url, body = _probe(endpoint, two_workspaces)
    before = row_counts()
    for method in METHODS:
        if method == "GET":
            response = Client().get(url, body, headers={"Authorization": f"Bearer {token}"})
        else:
            response = Client().post(
                url, json.dumps(body), content_type="application/json", headers={"Authorization": f"Bearer {token}"}
            )
        text = response.content.decode()
        assert response.status_code < 500, (method, response.status_code, text[:300])
        assert SECRET not in text, (method, response.status_code, text[:300])
        if response.status_code < 300 and endpoint.route not in ("mcp",):
            assert '"ws-b"' not in text, (method, text[:300])
    after = row_counts()
    assert after == before


def test_a_bound_token_sees_only_its_workspace_in_lists_and_its_own_objects(two_workspaces: Any) -> None:
    from tests.support.clients import ApiClient

    client = ApiClient(issue_token("bound-a", ["full"], workspaces=["ws-a"]).plaintext)
    assert [w["slug"] for w in client.get("/api/v1/workspaces").json()["workspaces"]] == ["ws-a"]
    run = client.get(f"/api/v1/refine/{two_workspaces['run']}")
    assert (run.status_code, run.json()["field"]) == (404, "id")
    everywhere = client.post("/api/v1/lessons/retrieve", {"task": f"deploy {SECRET}"})
    assert (everywhere.status_code, everywhere.json()["field"]) == (400, "workspace")
    own = client.post("/api/v1/lessons/retrieve", {"task": f"deploy {SECRET}", "workspace": "ws-a"})
    assert own.status_code == 200 and own.json()["lessons"] == []
