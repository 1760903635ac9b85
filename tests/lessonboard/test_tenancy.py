"""Tenancy by construction (docs/security.md#tenancy-and-the-gate): two workspaces never share a job, a
lesson or an answer that names the other's objects."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from lessonboard.tokens import issue_token
from lessonq import processing
from lessonq.ingest import LessonRequest
from lessonq.models import Job
from lessons.models import Lesson
from tests.conftest import ApiClient
from tests.factories import WorkspaceFactory
from tests.fakes.openai_server import Reply

pytestmark = pytest.mark.django_db

TRIGGERS = "/api/v1/reflexion/triggers"
LESSONS = "/api/v1/lessons"
RETRIEVE = "/api/v1/lessons/retrieve"
LESSON = (
    "<situation>deploying with helm to the cluster</situation><mistake>waited on a helm timeout</mistake>"
    "<correction>raise the helm timeout and watch the rollout</correction><tags>helm, deploy</tags>"
)
FAILURE = {"task": "deploy the app with helm", "error": "helm timed out", "agent": "coder"}


@pytest.fixture(autouse=True)
def _queue(settings: Any, tmp_path: Path) -> None:
    """Ingest writes to this test's own WAL folder and node queue (no worker takes the messages)."""
    base = tmp_path / "lessonq"
    for sub in ("wal", "dlq", "quarantine", "expired"):
        (base / sub).mkdir(parents=True)
    settings.LESSONQ_BASE_DIR = base
    settings.NODE_NAME = "q3" + uuid.uuid4().hex[:8]
    settings.LESSONQ_QUEUE = f"lessonq.{settings.NODE_NAME}"
    settings.LESSONS_EMBEDDING_PROVIDER = "none"


def bound(slug: str, scopes: tuple[str, ...] = ("full",)) -> ApiClient:
    WorkspaceFactory(slug=slug)
    return ApiClient(issue_token(f"agent-{slug}", list(scopes), workspaces=[slug]).plaintext)


def test_the_same_failure_in_two_workspaces_is_two_jobs_and_two_lessons(fake_openai: Any) -> None:
    shop, billing = bound("shop"), bound("billing")
    first = shop.post(TRIGGERS, {**FAILURE, "workspace": "shop"})
    second = billing.post(TRIGGERS, {**FAILURE, "workspace": "billing"})
    assert (first.status_code, second.status_code) == (202, 202)
    assert (first.json()["status"], second.json()["status"]) == ("accepted", "accepted")
    shop_job, billing_job = first.json()["job_id"], second.json()["job_id"]
    assert shop_job != billing_job  # billing's answer does not name shop's job
    # Both are chatcli-shaped ids, and each job still knows chatcli's own id of the request.
    chatcli = LessonRequest(task=FAILURE["task"], attempt="", outcome="ERROR: helm timed out", trigger="error").job_id
    jobs = {job.pk: job for job in Job.objects.all()}
    assert set(jobs) == {shop_job, billing_job}
    assert {job.chatcli_job_id for job in jobs.values()} == {chatcli}
    assert chatcli not in jobs  # a workspace's job is keyed by its workspace too
    assert (jobs[shop_job].workspace.slug, jobs[billing_job].workspace.slug) == ("shop", "billing")  # type: ignore[union-attr]

    # The same report again in one workspace is that workspace's own duplicate.
    again = billing.post(TRIGGERS, {**FAILURE, "workspace": "billing"})
    assert (again.json()["status"], again.json()["job_id"]) == ("deduped", billing_job)

    fake_openai.script(Reply(text=LESSON), Reply(text=LESSON))
    assert processing.process(shop_job) == "success"
    assert processing.process(billing_job) == "success"
    lessons = {lesson.workspace.slug: lesson for lesson in Lesson.objects.all()}  # type: ignore[union-attr]
    assert set(lessons) == {"shop", "billing"}  # the same text is two lessons, not a reinforcement across
    assert lessons["shop"].source_job_id == shop_job and lessons["billing"].source_job_id == billing_job
    assert lessons["shop"].confidence == lessons["billing"].confidence

    for client, slug in ((shop, "shop"), (billing, "billing")):
        found = client.post(RETRIEVE, {"task": "deploy the app with helm", "workspace": slug}).json()
        assert [hit["id"] for hit in found["lessons"]] == [lessons[slug].pk], slug
        assert found["lessons"][0]["workspace"] == slug


def test_an_exact_duplicate_lesson_in_another_workspace_is_not_reinforced() -> None:
    a, b = bound("ws-a"), bound("ws-b")
    body = {"situation": "running migrations", "correction": "take a backup first", "confidence": 0.6}
    theirs = b.post(LESSONS, {**body, "workspace": "ws-b"})
    assert (theirs.status_code, theirs.json()["action"]) == (201, "created")
    ours = a.post(LESSONS, {**body, "workspace": "ws-a"})
    assert (ours.status_code, ours.json()["action"]) == (201, "created")
    assert ours.json()["lesson"]["workspace"] == "ws-a"
    assert ours.json()["lesson"]["id"] != theirs.json()["lesson"]["id"]
    assert Lesson.objects.get(pk=theirs.json()["lesson"]["id"]).confidence == 0.6  # untouched
    # In its own workspace the same text is the exact duplicate it always was.
    again = a.post(LESSONS, {**body, "workspace": "ws-a"})
    assert (again.status_code, again.json()["action"]) == (200, "reinforced")
    assert again.json()["lesson"]["id"] == ours.json()["lesson"]["id"]


# --- the validation the docs promise ---------------------------------------------------------------------
@pytest.mark.parametrize("body", [{"task": "", "error": "boom"}, {"task": " \n ", "error": "boom"}])
def test_an_empty_task_is_refused(body: dict[str, str]) -> None:
    response = ApiClient(issue_token("agent", ["full"]).plaintext).post(TRIGGERS, body)
    assert (response.status_code, response.json()["field"]) == (400, "task")
    assert not Job.objects.exists()


def test_an_empty_raw_task_is_refused() -> None:
    body = {"Task": "", "Attempt": "a", "Outcome": "o", "Trigger": "error"}
    response = ApiClient(issue_token("agent", ["full"]).plaintext).post(TRIGGERS, body)
    assert (response.status_code, response.json()["field"]) == (400, "Task")


def test_a_413_states_the_limit_in_bytes_and_the_setting(settings: Any) -> None:
    client = ApiClient(issue_token("agent", ["full"]).plaintext)
    WorkspaceFactory(slug="proj")
    settings.REVIEW_SUMMARY_MAX = 10
    response = client.post("/api/v1/reviews", {"summary": "x" * 5000, "workspace": "proj"})
    assert (response.status_code, response.json()["field"]) == (413, "body")
    error = response.json()["error"]
    assert f"{10 * 4 + 4096} bytes" in error and "LESSONBOARD_REVIEW_SUMMARY_MAX" in error
    fixed = client.post(RETRIEVE, {"task": "x" * (300 * 1024)})
    assert fixed.status_code == 413 and f"{256 * 1024} bytes" in fixed.json()["error"]
    assert "fixed limit" in fixed.json()["error"] and "DATA_UPLOAD" not in fixed.json()["error"]
