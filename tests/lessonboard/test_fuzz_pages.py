"""Fuzzing the pages' filters (Hypothesis, Django test client, real PostgreSQL): random query strings on
every list page answer 200 or a 4xx, never a 500 (docs/api.md#input-policy)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.django_db

PAGES = {
    "/queue/": ["tab", "q", "trigger", "agent", "workspace", "group", "newer", "older", "died", "sort", "after"],
    "/queue/groups/": ["tab", "q", "trigger", "agent", "sort"],
    "/queue/counts": ["tab", "q"],
    "/lessons/": ["q", "tags", "trigger", "workspace", "agent", "status", "since", "until", "similar", "page"],
    "/lessons/merge": ["a", "b", "ids"],
    "/refine/": ["agent", "status", "converged", "rolled_back", "since", "until", "page"],
    "/reviews/": ["target", "workspace", "page"],
    "/reviews/decisions/": ["target", "decision", "status", "workspace", "reviewer", "page"],
    "/audit/": ["action", "actor", "object_type", "object_id", "since", "until", "after"],
    "/workspaces/": ["page"],
}
ODD = st.sampled_from(
    [
        "",
        "-1",
        "0",
        "1e999",
        "NaN",
        "99999999999999999999999",
        "2026-13-45",
        "0000-00-00",
        "%",
        "'",
        "\\",
        "é" * 50,
        "x" * 3000,
        "dead",
        "eyJ4IjoxfQ",
        "W10",
        "a\x00b",
        "[[[",
    ]
)


@pytest.mark.parametrize("page", list(PAGES))
def test_no_page_filter_answers_a_server_error(client_as: Any, admin_user: Any, page: str) -> None:
    client: Client = client_as(admin_user)

    @settings(
        max_examples=40,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.dictionaries(st.sampled_from(PAGES[page]), ODD | st.text(max_size=30), max_size=5))
    def check(params: dict[str, str]) -> None:
        response = client.get(page, params)
        assert response.status_code < 500, (page, params, response.status_code)

    check()
