"""Probes an attacker would try, kept as tests: redirects off-site through a user-supplied URL, framing,
and script smuggled into text the pages show (docs/security.md#security)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client

from lessonboard.models import AuditEvent
from lessons import vectors
from lessons.review.staging import run_review
from lessons.store import persist_lesson
from tests.factories import WorkspaceFactory
from tests.support.clients import PASSWORD
from tests.support.queue import make_job
from tests.support.review import hold

pytestmark = pytest.mark.django_db

OFF_SITE = ["https://evil.example/", "//evil.example/", "/\\evil.example/", "https:evil.example", "///evil.example/"]


def assert_on_site(response: Any) -> None:
    assert response.status_code == 302
    location = response["Location"]
    parts = urlsplit(location)
    assert parts.scheme == "" and parts.netloc == "", location
    assert location.startswith("/") and not location.startswith(("//", "/\\")), location
    assert "evil.example" not in location


# --- open redirects ------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", OFF_SITE)
def test_the_login_page_never_sends_a_user_off_site(carol: Any, target: str) -> None:
    client = Client()
    form = client.get("/accounts/login/", {"next": target})
    assert form.status_code == 200
    response = client.post(f"/accounts/login/?next={target}", {"username": "carol", "password": PASSWORD})
    assert_on_site(response)
    assert response["Location"] == "/"
    # Already logged in, the login page redirects at once; still not off-site.
    assert_on_site(client.get("/accounts/login/", {"next": target}))


@pytest.mark.parametrize("target", OFF_SITE)
def test_the_admin_login_never_sends_a_user_off_site(admin_user: Any, target: str) -> None:
    response = Client().post(f"/admin/login/?next={target}", {"username": "root", "password": PASSWORD})
    assert_on_site(response)


@pytest.mark.parametrize("target", OFF_SITE)
def test_logging_out_never_sends_a_user_off_site(client_as: Any, carol: Any, target: str) -> None:
    response = client_as(carol).post("/accounts/logout/", {"next": target})
    assert_on_site(response)
    assert response["Location"] == "/accounts/login/"


@pytest.mark.parametrize("target", [*OFF_SITE, "https://evil.example/queue/", "//evil.example/queue/"])
@pytest.mark.parametrize("action", ["retry", "purge", "retry-now"])
def test_queue_actions_go_back_only_to_a_queue_page(client_as: Any, alice: Any, action: str, target: str) -> None:
    # An unknown job: the action refuses with a message and goes "back", to the queue, whatever next says.
    response = client_as(alice).post(f"/queue/jobs/0000000000000000/{action}", {"next": target})
    assert_on_site(response)
    assert response["Location"].startswith("/queue/")
    on_site = client_as(alice).post("/queue/jobs/0000000000000000/purge", {"next": "/queue/?tab=dead&page=2"})
    assert on_site["Location"] == "/queue/?tab=dead&page=2"  # a queue page is honoured


# --- framing ---------------------------------------------------------------------------------------------
def test_no_page_can_be_framed(client_as: Any, carol: Any, admin_user: Any) -> None:
    admin = Client()
    admin.force_login(admin_user)
    responses = {
        "login page": Client().get("/accounts/login/"),
        "overview": client_as(carol).get("/"),
        "lessons": client_as(carol).get("/lessons/"),
        "not found": client_as(carol).get("/no-such-page/"),
        "admin": admin.get("/admin/"),
    }
    for name, response in responses.items():
        assert response.status_code in (200, 404), name
        assert response["X-Frame-Options"] == "DENY", name
        assert "frame-ancestors 'none'" in response["Content-Security-Policy"], name


# --- stored script in shown text -------------------------------------------------------------------------
SCRIPT = "<script>alert(1)</script>"
ATTRIBUTE = '"><img src=x onerror=alert(1)>'


@pytest.fixture
def hostile_text(queue_dir: Path) -> dict[str, str]:
    """A lesson, a dead job, a pending proposal and an audit event whose text fields carry the payloads;
    the paths of the pages that show each of them."""
    lesson = persist_lesson(
        situation=f"deploying {SCRIPT} payments",
        mistake=f"quoted {ATTRIBUTE} badly",
        correction=f"escape {SCRIPT} and {ATTRIBUTE}",
        tags=["xss"],
        trigger="error",
        source_job_id="job-xss",
    ).lesson
    vectors.embed_pending()
    job = make_job(task=f"task {SCRIPT} {ATTRIBUTE}", error=f"permanent: {SCRIPT} {ATTRIBUTE}")
    proposal = {
        "target": "memory",
        "op": "add",
        "content": f"fact {SCRIPT} {ATTRIBUTE}",
        "rationale": f"because {ATTRIBUTE}",
        "score": 0.9,
    }
    workspace: Any = WorkspaceFactory(slug="acme")
    run = run_review(workspace, f"did {SCRIPT}", agent="coder", proposer=lambda s: [proposal], gate=hold)
    assert run.error is None
    (row,) = run.run.proposals.all()
    AuditEvent.record(
        "probe.xss", object_type="job", object_ids=[ATTRIBUTE], result={"note": SCRIPT}, reason=f"why {ATTRIBUTE}"
    )
    return {
        "lesson list": "/lessons/",
        "lesson search": "/lessons/?q=deploying+payments",
        "lesson detail": f"/lessons/{lesson.pk}/",
        "queue dead tab": "/queue/?tab=dead",
        "job page": f"/queue/jobs/{job.pk}/",
        "review queue": "/reviews/",
        "proposal": f"/reviews/{row.pk}/",
        "audit": "/audit/",
        "inbox": "/inbox/",
    }


def test_script_in_stored_text_is_shown_escaped_never_run(
    client_as: Any, bob: Any, hostile_text: dict[str, str]
) -> None:
    client = client_as(bob)
    for name, path in hostile_text.items():
        response = client.get(path)
        assert response.status_code == 200, name
        body = response.content.decode()
        assert "alert(1)" in body, f"{name} does not show the text at all, so it proves nothing"
        assert "<script>alert" not in body, name
        assert "<img src=x" not in body and '"><img' not in body, name
