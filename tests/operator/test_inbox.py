"""The inbox: one list of what waits for a person, each row's action done in place."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache

from lessonboard import inbox
from lessonq.models import Job, JobState
from lessonq.triage.models import BulkAction
from lessons.review.models import Proposal
from tests.refine.conftest import make_run, reply

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def add(content: str, score: float = 0.9) -> dict[str, Any]:
    return {"target": "memory", "op": "add", "content": content, "rationale": "because", "score": score}


def test_it_lists_dead_groups_proposals_and_rolled_back_runs_most_urgent_first(client_as, carol, jobs, stage):
    jobs(error="permanent: the model answered with prose")
    stage(add("uses pnpm"))
    run = make_run(reply("Deploy with helm upgrade --atomic."), reply("Something else entirely, about cooking."))
    page = client_as(carol).get("/inbox/").content.decode()
    assert page.index("permanent: the model answered with prose") < page.index("uses pnpm")  # died just now
    if run.rolled_back or run.low_quality:
        assert f"Refine run #{run.pk}" in page
    assert '<span class="nav-count" id="nav-inbox-count">' in page  # the nav counts what waits


def test_it_offers_only_the_actions_a_role_may_take(client_as, carol, bob, stage):
    stage(add("uses pnpm"))
    viewer = client_as(carol).get("/inbox/").content.decode()
    assert 'value="approve"' not in viewer and 'value="dismiss"' in viewer
    reviewer = client_as(bob).get("/inbox/").content.decode()
    assert 'value="approve"' in reviewer and 'value="reject"' in reviewer


def test_it_approves_a_proposal_in_place(client_as, bob, stage):
    (row,) = stage(add("uses pnpm"))
    response = client_as(bob).post("/inbox/act", {"kind": "proposal", "key": row.pk, "action": "approve"}, headers=HTMX)
    body = response.content.decode()
    assert f"Approved #{row.pk}: written to Agent notes (MEMORY.md)." in body and "data-inbox-done" in body
    assert 'id="nav-inbox-count" hx-swap-oob="true">0<' in body
    assert Proposal.objects.get(pk=row.pk).status == "applied"


def test_it_wants_a_reason_to_reject_and_then_rejects(client_as, bob, stage):
    (row,) = stage(add("the sky is green"))
    client = client_as(bob)
    refused = client.post("/inbox/act", {"kind": "proposal", "key": row.pk, "action": "reject"}, headers=HTMX)
    assert "A rejection needs a reason." in refused.content.decode()
    done = client.post(
        "/inbox/act", {"kind": "proposal", "key": row.pk, "action": "reject", "reason": "not true"}, headers=HTMX
    )
    assert f"Rejected #{row.pk}: not true" in done.content.decode()


def test_it_refuses_a_viewer_approving_from_the_inbox(client_as, carol, stage):
    (row,) = stage(add("uses pnpm"))
    response = client_as(carol).post("/inbox/act", {"kind": "proposal", "key": row.pk, "action": "approve"})
    assert response.status_code == 403 and "reviewer or admin role" in response.content.decode()
    assert Proposal.objects.get(pk=row.pk).status == "pending"


def test_it_retries_an_error_group_in_place(client_as, alice, jobs):
    dead = [jobs(error="permanent: quota exceeded") for _ in range(3)]
    fingerprint = Job.objects.get(pk=dead[0].pk).fingerprint
    response = client_as(alice).post(
        "/inbox/act", {"kind": "dead", "key": fingerprint, "action": "retry"}, headers=HTMX
    )
    assert "Retrying 3 jobs (bulk #" in response.content.decode()
    action = BulkAction.objects.get()
    assert action.kind == "retry" and action.total == 3 and action.filter == {"tab": "dead", "group": fingerprint}


def test_it_says_when_the_group_was_already_handled(client_as, alice, jobs):
    job = jobs()
    fingerprint = Job.objects.get(pk=job.pk).fingerprint
    Job.objects.filter(pk=job.pk).update(state=JobState.PURGED)
    response = client_as(alice).post(
        "/inbox/act", {"kind": "dead", "key": fingerprint, "action": "retry"}, headers=HTMX
    )
    assert "someone already retried or purged it" in response.content.decode()


def test_it_dismisses_for_one_person_until_the_group_grows(client_as, alice, bob, jobs):
    job = jobs(error="permanent: quota exceeded")
    fingerprint = Job.objects.get(pk=job.pk).fingerprint
    client_as(alice).post("/inbox/act", {"kind": "dead", "key": fingerprint, "action": "dismiss"}, headers=HTMX)
    assert [i.key for i in inbox.items_for(alice)] == []
    assert [i.key for i in inbox.items_for(bob)] == [fingerprint]  # dismissing is per person
    jobs(error="permanent: quota exceeded")  # a new death in the group after the dismissal
    cache.clear()  # the error groups are cached for a few seconds
    assert [i.key for i in inbox.items_for(alice)] == [fingerprint]


def test_it_rejects_an_unknown_action(client_as, alice):
    assert client_as(alice).post("/inbox/act", {"kind": "dead", "key": "x", "action": "explode"}).status_code == 400


def test_it_rejects_a_malformed_item_key(client_as, alice):
    client = client_as(alice)
    assert client.post("/inbox/act", {"kind": "dead", "key": "../../etc", "action": "retry"}).status_code == 400
    assert client.post("/inbox/act", {"kind": "proposal", "key": "1; drop", "action": "dismiss"}).status_code == 400


def test_it_lists_knowledge_gaps_and_closes_one_in_place(client_as, bob, carol, api):
    from lessons.usage.models import Retrieval

    for _ in range(3):
        api.post("/api/v1/lessons/retrieve", {"task": "rotate the TLS certificates", "workspace": "empty"})
    cache.clear()
    html = client_as(carol).get("/inbox/").content.decode()
    assert "Knowledge gap" in html and "rotate the TLS certificates" in html and "asked 3×" in html
    key = str(Retrieval.objects.order_by("-created_at", "-id").first().pk)
    refused = client_as(carol).post("/inbox/act", {"kind": "gap", "key": key, "action": "close"}, headers=HTMX)
    assert refused.status_code == 403
    done = client_as(bob).post("/inbox/act", {"kind": "gap", "key": key, "action": "close"}, headers=HTMX)
    assert "Closed: 3 tasks, no lesson needed." in done.content.decode()
    assert not Retrieval.objects.gaps().exists()
    again = client_as(bob).post("/inbox/act", {"kind": "gap", "key": key, "action": "close"}, headers=HTMX)
    assert "already closed" in again.content.decode()
