"""A lesson from a DLQ root cause: "propose a lesson" on a dead job and on an error group, prefilled from
the task and the errors, staged as a pending lesson proposal for a reviewer."""

from __future__ import annotations

from typing import Any

import pytest

from lessonboard.models import AuditEvent
from lessonq.models import Job
from lessons.review.models import Proposal

pytestmark = pytest.mark.django_db


def test_it_prefills_the_draft_from_a_dead_jobs_task_and_errors(client_as: Any, alice: Any, jobs: Any) -> None:
    job = jobs(task="migrate the orders table", error="permanent: lock timeout after 30s", attempts=3, agent="mig")
    page = client_as(alice).get("/queue/propose-lesson", {"job": job.id})
    assert page.status_code == 200
    html = page.content.decode()
    assert "migrate the orders table</textarea>" in html
    assert "error after 3 attempts:\n- permanent: lock timeout after 30s" in html
    assert 'id="propose-lesson"' in client_as(alice).get(f"/queue/jobs/{job.id}/").content.decode()


def test_it_stages_the_edited_draft_as_a_pending_lesson_proposal(client_as: Any, alice: Any, jobs: Any) -> None:
    job = jobs(task="migrate the orders table", error="permanent: lock timeout after 30s", agent="mig")
    response = client_as(alice).post(
        "/queue/propose-lesson",
        {
            "job": job.id,
            "situation": "migrating a big table",
            "mistake": "took an ACCESS EXCLUSIVE lock for minutes",
            "correction": "add the column as nullable, backfill in batches",
            "tags": "sql, Migrations",
        },
    )
    proposal = Proposal.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/reviews/{proposal.pk}/"
    assert (proposal.status, proposal.target, proposal.op) == ("pending", "lesson", "add")
    assert proposal.lesson["correction"] == "add the column as nullable, backfill in batches"
    assert proposal.lesson["tags"] == ["sql", "migrations"]
    assert proposal.agent == "mig" and proposal.workspace.slug == "default"
    assert AuditEvent.objects.filter(action="queue.propose_lesson", object_ids=[job.id]).exists()
    assert Job.objects.get(pk=job.id).state == "dead"  # proposing changes nothing in the queue


def test_it_needs_a_correction(client_as: Any, alice: Any, jobs: Any) -> None:
    job = jobs()
    response = client_as(alice).post(
        "/queue/propose-lesson", {"job": job.id, "situation": "s", "mistake": "m", "correction": ""}
    )
    assert response.status_code == 200 and "This field is required" in response.content.decode()
    assert not Proposal.objects.exists()


def test_it_draws_from_an_error_group(client_as: Any, alice: Any, bob: Any, jobs: Any) -> None:
    for n in range(3):
        jobs(task=f"deploy service {n}", error="transient: 503 from the registry")
    fingerprint = Job.objects.first().fingerprint
    page = client_as(bob).get("/queue/propose-lesson", {"group": fingerprint})
    html = page.content.decode()
    assert page.status_code == 200 and "(3 dead jobs)" in html and "also: deploy service" in html
    assert "data-propose-lesson" in client_as(alice).get("/queue/groups/").content.decode()


def test_a_groups_draft_names_only_the_tasks_of_the_workspace_its_lesson_goes_to(
    client_as: Any, alice: Any, jobs: Any
) -> None:
    """An error group spans workspaces; its lesson goes to the newest job's, whose agents are served it:
    another workspace's task text and counts stay out of it."""
    from datetime import timedelta

    from django.utils import timezone

    from tests.factories import WorkspaceFactory

    shop, billing = WorkspaceFactory(slug="shop"), WorkspaceFactory(slug="billing")
    hour_ago = timezone.now() - timedelta(hours=1)
    jobs(task="shop secret task", error="transient: 503 from the registry", workspace=shop, finished_at=hour_ago)
    jobs(task="billing older task", error="transient: 503 from the registry", workspace=billing, finished_at=hour_ago)
    jobs(task="billing newest task", error="transient: 503 from the registry", workspace=billing)
    fingerprint = Job.objects.first().fingerprint
    assert Job.objects.filter(fingerprint=fingerprint).count() == 3
    html = client_as(alice).get("/queue/propose-lesson", {"group": fingerprint}).content.decode()
    assert "billing newest task</textarea>" in html and "also: billing older task" in html
    assert "shop secret task" not in html and "(2 dead jobs)" in html


def test_viewers_cannot_propose_and_unknown_sources_are_404(client_as: Any, carol: Any, alice: Any, jobs: Any) -> None:
    job = jobs()
    assert client_as(carol).get("/queue/propose-lesson", {"job": job.id}).status_code == 403
    assert client_as(carol).post("/queue/propose-lesson", {"job": job.id, "correction": "x"}).status_code == 403
    assert client_as(alice).get("/queue/propose-lesson", {"job": "0" * 16}).status_code == 404
    assert client_as(alice).get("/queue/propose-lesson", {"group": "nope"}).status_code == 404
    assert client_as(alice).get("/queue/propose-lesson").status_code == 404
    assert not Proposal.objects.exists()
