"""Bad input never answers 500: deep nesting, NUL, lone surrogates, odd numbers and wrong types are a 4xx
naming the field, on every POST endpoint and on pages (docs/api.md#input-policy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lessonboard.models import Workspace
from refine.models import RefineRun

pytestmark = pytest.mark.django_db

POST_ENDPOINTS = [
    "/api/v1/reflexion/triggers",
    "/api/v1/lessons",
    "/api/v1/lessons/retrieve",
    "/api/v1/reviews",
    "/api/v1/refine",
    "/api/v1/refine/mode",
    "/api/v1/workspaces/ws/reflect/prepare",
    "/api/v1/workspaces/ws/reflect/commit",
]


@pytest.fixture
def everything(settings: Any, tmp_path: Path, fake_openai: Any) -> None:
    """Each endpoint reachable: a workspace, a queue dir, no waiting on refine runs."""
    Workspace.objects.for_slug("ws")
    settings.LESSONQ_BASE_DIR = tmp_path / "lessonq"
    settings.REFINE_API_WAIT = 0


@pytest.mark.parametrize("url", POST_ENDPOINTS)
@pytest.mark.parametrize("depth", [40, 100_000])
def test_it_refuses_deeply_nested_json_on_every_post_endpoint(api: Any, everything: None, url: str, depth: int) -> None:
    response = api.post(url, raw='{"task":' + "[" * depth + "]" * depth + "}")
    assert response.status_code in (400, 413), (url, response.content[:200])  # 413: over the endpoint's size cap
    assert response.json()["field"] == "body"
    assert response.status_code == 413 or "nested deeper" in response.json()["error"]


@pytest.mark.parametrize("url", POST_ENDPOINTS)
@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "9" * 5000])
def test_it_refuses_numbers_json_cannot_carry(api: Any, everything: None, url: str, number: str) -> None:
    response = api.post(url, raw='{"k": ' + number + ', "max_passes": ' + number + "}")
    assert response.status_code in (400, 413), (url, response.content[:200])
    assert response.json()["field"] == "body"


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/v1/lessons", '{"text": "a\\u0000b"}', "text"),
        ("/api/v1/lessons", '{"text": "a\\ud800b"}', "text"),
        ("/api/v1/lessons", '{"situation": "s", "correction": "c", "tags": ["x\\u0000"]}', "tags[0]"),
        ("/api/v1/lessons/retrieve", '{"task": "a\\u0000b"}', "task"),
        ("/api/v1/lessons/retrieve", '{"task": "t", "workspace": "\\udfff"}', "workspace"),
        ("/api/v1/reviews", '{"summary": "s\\u0000", "workspace": "ws"}', "summary"),
        ("/api/v1/refine", '{"task": "t", "draft": "d\\ud800"}', "draft"),
        ("/api/v1/refine/mode", '{"agent": "a\\u0000", "mode": "on"}', "agent"),
        ("/api/v1/workspaces/ws/reflect/commit", '{"files": [{"path": "a\\u0000", "content": "x"}]}', "files[0].path"),
        ("/api/v1/reflexion/triggers", '{"task": "t", "error": "e", "agent": "a\\u0000"}', "agent"),
    ],
)
def test_it_refuses_nul_and_lone_surrogates_naming_the_field(
    api: Any, everything: None, url: str, body: str, field: str
) -> None:
    response = api.post(url, raw=body)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/v1/lessons/retrieve", {"task": "t", "k": 2.5}, "k"),
        ("/api/v1/lessons/retrieve", {"task": "t", "k": 10**30}, "k"),
        ("/api/v1/lessons/retrieve", {"task": ["t"]}, "task"),
        ("/api/v1/lessons", {"situation": "s", "correction": "c", "confidence": "high"}, "confidence"),
        ("/api/v1/refine", {"task": "t", "draft": "d", "max_passes": 1.5}, "max_passes"),
        ("/api/v1/refine", {"task": "t", "draft": {"x": 1}}, "draft"),
        ("/api/v1/reflexion/triggers", {"task": 5, "error": "e"}, "task"),
        ("/api/v1/reflexion/triggers", {"task": "t", "metadata": {"force_reflexion": 1.5}}, "metadata.force_reflexion"),
    ],
)
def test_it_refuses_wrong_types_naming_the_field(
    api: Any, everything: None, url: str, body: dict[str, Any], field: str
) -> None:
    response = api.post(url, body)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field


def test_it_refuses_nul_in_an_api_query_string(api: Any) -> None:
    response = api.get("/api/v1/refine/mode", {"agent": "a\x00b"})
    assert response.status_code == 400
    assert response.json() == {"error": "the field 'agent' contains a NUL character", "field": "agent"}
    response = api.get("/api/v1/memory/memory", {"workspace": "a\x00b"})
    assert response.status_code == 400


@pytest.mark.parametrize(
    "url",
    [
        "/queue/?agent=a%00b",
        "/queue/?tab=dead&q=%00",
        "/lessons/?q=a%00",
        "/audit/?actor=%00",
        "/refine/?agent=%00",
        "/reviews/?workspace=%00",
        "/reviews/decisions/?reviewer=%00",
        "/queue/jobs/%00/",
        "/workspaces/a%00/",
    ],
)
def test_pages_answer_400_to_nul_in_a_filter_or_path(client_as: Any, admin_user: Any, url: str) -> None:
    response = client_as(admin_user).get(url)
    assert response.status_code == 400, (url, response.status_code)
    assert "NUL" in response.content.decode()


def test_forms_answer_400_to_nul_before_anything_is_saved(client_as: Any, admin_user: Any) -> None:
    from lessons.models import Lesson

    response = client_as(admin_user).post(
        "/lessons/new", {"situation": "s\x00", "correction": "c", "mistake": "", "tags": "", "trigger": "manual"}
    )
    assert response.status_code == 400
    assert "'situation'" in response.content.decode()
    assert Lesson.objects.count() == 0


def test_a_value_postgresql_refuses_is_a_400_not_a_503(api: Any, everything: None, monkeypatch: Any) -> None:
    """The last line of defence: a DataError means the request, not the database, is at fault."""
    from django.db import DataError

    from lessons import api_views

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise DataError("value too long for type character varying(20)")

    monkeypatch.setattr(api_views.retrieval, "search", refuse)
    response = api.post("/api/v1/lessons/retrieve", {"task": "t"})
    assert response.status_code == 400
    assert response.json()["field"] == "body"


def test_a_program_limit_postgresql_hits_is_a_400_not_a_503(api: Any, everything: None, monkeypatch: Any) -> None:
    """SQLSTATE class 54 (a word or a statement too big for PostgreSQL) is the request's size, which a retry
    would not change; what the driver raises for it is an OperationalError, which otherwise reads as an outage."""
    import psycopg
    from django.db import OperationalError

    from lessons import api_views

    def refuse(*args: Any, **kwargs: Any) -> None:
        try:
            raise psycopg.errors.ProgramLimitExceeded("word is too long (3000 bytes, max 2047 bytes)")
        except psycopg.Error as cause:
            raise OperationalError(str(cause)) from cause

    monkeypatch.setattr(api_views.retrieval, "search", refuse)
    response = api.post("/api/v1/lessons/retrieve", {"task": "t"})
    assert response.status_code == 400
    assert response.json()["field"] == "body"


@pytest.mark.parametrize(
    "reply",
    ['{"proposals": [{"action": "add", "target": "memory", "content": "a\\u0000b"}]}', "[" * 5000 + "]" * 5000],
)
def test_a_review_whose_model_reply_holds_nul_or_deep_nesting_is_not_a_500(
    api: Any, everything: None, fake_openai: Any, reply: str
) -> None:
    from tests.fakes.openai_server import Reply

    fake_openai.responder = lambda payload: Reply(text=reply)
    response = api.post("/api/v1/reviews", {"summary": "did things", "workspace": "ws"})
    assert response.status_code in (200, 502), response.content[:300]
    assert set(response.json()) >= {"applied", "rejected", "failed", "pending"}


@pytest.mark.parametrize(
    "url",
    [
        "/lessons/99999999999999999999999/",
        "/lessons/99999999999999999999999/edit",
        "/refine/99999999999999999999999/",
        "/reviews/99999999999999999999999/",
        "/lessons/?similar=99999999999999999999999",
        "/lessons/?page=99999999999999999999999",
        "/queue/jobs/ffffffffffffffffffffffffffffffffffff/",
    ],
)
def test_pages_answer_4xx_to_integers_beyond_any_column(client_as: Any, admin_user: Any, url: str) -> None:
    response = client_as(admin_user).get(url)
    assert response.status_code < 500, (url, response.status_code)


def test_the_api_answers_404_to_a_run_id_beyond_any_column(api: Any) -> None:
    response = api.get("/api/v1/refine/99999999999999999999999")
    assert response.status_code == 404


@pytest.mark.parametrize("value", ["²", "99999999999999999999999", "٣"])
def test_odd_digits_in_a_bulk_review_or_a_pass_number_are_not_a_500(
    client_as: Any, admin_user: Any, value: str
) -> None:
    client = client_as(admin_user)
    response = client.post("/reviews/bulk", {"ids": [value], "action": "approve"})
    assert response.status_code in (302, 400), response.status_code
    run = RefineRun.objects.create(task="t", original_draft="d", final_output="d")
    run.passes.create(number=1, similarity_to_original=1.0, best_similarity=1.0, decision="keep")
    response = client.get(f"/refine/{run.pk}/", {"pass": value})
    assert response.status_code < 500


def refuse_audit(monkeypatch: Any) -> None:
    from lessonboard.models import AuditEvent

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("audit store refused")

    monkeypatch.setattr(AuditEvent, "record", refuse)


def test_a_lesson_action_and_its_audit_event_commit_together(client_as: Any, admin_user: Any, monkeypatch: Any) -> None:
    from django.test import Client

    from lessons.models import Lesson, LessonStatus
    from lessons.store import persist_manual

    lesson = persist_manual("use targeted Edit for large files", actor="test").lesson
    refuse_audit(monkeypatch)
    client: Client = client_as(admin_user)
    client.raise_request_exception = False
    response = client.post(f"/lessons/{lesson.pk}/status", {"status": LessonStatus.ARCHIVED, "reason": "old"})
    assert response.status_code == 500  # the audit store failed: so did the action
    lesson.refresh_from_db()
    assert lesson.status == LessonStatus.ACTIVE
    response = client.post("/lessons/new", {"text": "another lesson entirely about helm"})
    assert Lesson.objects.count() == 1


def test_an_api_lesson_and_its_audit_event_commit_together(api: Any, monkeypatch: Any) -> None:
    from lessons.models import Lesson

    refuse_audit(monkeypatch)
    api.client.raise_request_exception = False
    response = api.post("/api/v1/lessons", {"text": "use targeted Edit for large files"})
    assert response.status_code == 500
    assert not Lesson.objects.exists()
