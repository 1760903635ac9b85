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
    counts = {}
    for model in apps.get_models():
        if model._meta.managed and model._meta.label not in ("sessions.Session", "axes.AccessAttempt"):
            counts[model._meta.label] = model._default_manager.count()
    return counts


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
