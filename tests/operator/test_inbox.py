"""The inbox: one list of what waits for a person, each row's action done in place."""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlencode

import pytest
from django.core.cache import cache

from console import inbox
from lessonboard.models import Workspace
from lessonq.models import Job, JobState
from lessonq.triage.models import BulkAction
from lessons.reflect.commit import commit_reflection
from lessons.reflect.models import DocProposal, DocProposalStatus
from lessons.reflect.prepare import prepare_reflection
from lessons.reflect.repository import attach_repository
from lessons.review.models import Proposal
from lessons.usage import gaps
from tests.factories import WorkspaceFactory
from tests.support.gitrepo import GitRepo
from tests.support.refine import PASS_1, make_run, reply
from tests.support.reflect import HOW, new_how

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def add(content: str, score: float = 0.9) -> dict[str, Any]:
    return {"target": "memory", "op": "add", "content": content, "rationale": "because", "score": score}


def test_it_lists_dead_groups_proposals_and_rolled_back_runs_most_urgent_first(
    client_as, carol, jobs, stage, rolled_back_run
):
    jobs(error="permanent: the model answered with prose")
    stage(add("uses pnpm"))
    # The first critique reports an issue and the second pass changes nothing: low-quality, not rolled back.
    low = make_run(reply(PASS_1, "- say --atomic so a failed upgrade undoes itself"), reply(PASS_1))
    fine = make_run(reply(PASS_1, "- no material issues"), reply(PASS_1))
    assert rolled_back_run.rolled_back and (low.low_quality, low.rolled_back) == (True, False)
    assert not (fine.rolled_back or fine.low_quality)
    page = client_as(carol).get("/inbox/").content.decode()
    assert page.index("permanent: the model answered with prose") < page.index("uses pnpm")  # died just now
    assert page.index("uses pnpm") < page.index(f"Refine run #{rolled_back_run.pk} rolled back")  # worth a look
    assert f"Refine run #{low.pk} came out low-quality" in page
    assert f"Refine run #{fine.pk}" not in page
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


@pytest.mark.parametrize("kind", ["proposal", "doc", "gap"])
def test_a_key_that_is_no_row_id_is_refused_not_a_500(client_as, bob, kind):
    """ "²" is a digit to str.isdigit() (int() refuses it); an id of 4,301 digits is past int()'s limit."""
    action = "close" if kind == "gap" else "approve"
    for key in ("²", "1" * 4301):
        response = client_as(bob).post("/inbox/act", {"kind": kind, "key": key, "action": action})
        assert response.status_code == 400, (kind, key[:5], response.status_code)


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
    gaps.refresh()  # beat's refresh of the maintained gap groups (the inbox lists them)
    html = client_as(carol).get("/inbox/").content.decode()
    assert "Knowledge gap" in html and "rotate the TLS certificates" in html and "asked 3×" in html
    # The row opens the "Write a lesson" form, prefilled with the task.
    write = "/lessons/?" + urlencode({"new": "rotate the TLS certificates"}) + "#new-lesson"
    assert f'data-href="{write}"' in html and f'<a href="{write}" data-open>' in html
    form = client_as(bob).get(write.removesuffix("#new-lesson")).content.decode()
    assert "required>rotate the TLS certificates</textarea>" in form
    key = str(Retrieval.objects.order_by("-created_at", "-id").values_list("pk", flat=True)[0])
    refused = client_as(carol).post("/inbox/act", {"kind": "gap", "key": key, "action": "close"}, headers=HTMX)
    assert refused.status_code == 403
    done = client_as(bob).post("/inbox/act", {"kind": "gap", "key": key, "action": "close"}, headers=HTMX)
    assert "Closed: 3 tasks, no lesson needed." in done.content.decode()
    assert not Retrieval.objects.gaps().exists()
    again = client_as(bob).post("/inbox/act", {"kind": "gap", "key": key, "action": "close"}, headers=HTMX)
    assert "already closed" in again.content.decode()


@pytest.fixture
def doc_rewrite(repo: GitRepo) -> DocProposal:
    """A doc rewrite held by the workspace's human gate: staged, nothing written yet."""
    repo.write("src/routes/users.js", "export {}\n")
    repo.git("add", "-A")
    ws = attach_repository(cast(Workspace, WorkspaceFactory(slug="proj")), repo_path=str(repo.path), human_gate=True)
    prepare_reflection(workspace=ws, agent="dev")
    result = commit_reflection(workspace=ws, files={HOW: new_how(repo, "Users route.\n")}, agent="dev")
    assert result["pending"] is True and "Users route." not in repo.read(HOW)
    return DocProposal.objects.get(pk=result["proposal_id"])


def test_it_approves_a_doc_rewrite_in_place_and_writes_the_docs(client_as, bob, carol, repo, doc_rewrite):
    page = client_as(carol).get("/inbox/").content.decode()
    assert f'id="inbox-doc-{doc_rewrite.pk}"' in page and "Rewrite of 1 doc file in proj" in page
    client = client_as(bob)
    response = client.post("/inbox/act", {"kind": "doc", "key": doc_rewrite.pk, "action": "approve"}, headers=HTMX)
    body = response.content.decode()
    assert f"Approved doc rewrite #{doc_rewrite.pk}:" in body and "data-inbox-done" in body
    doc_rewrite.refresh_from_db()
    assert (doc_rewrite.status, doc_rewrite.decided_by) == (DocProposalStatus.APPLIED, bob)
    assert repo.read(HOW).endswith("Users route.\n")
    again = client.post("/inbox/act", {"kind": "doc", "key": doc_rewrite.pk, "action": "approve"}, headers=HTMX)
    assert "not pending" in again.content.decode() and 'class="failed"' in again.content.decode()
    assert f'id="inbox-doc-{doc_rewrite.pk}"' not in client_as(carol).get("/inbox/").content.decode()


def test_it_rejects_a_doc_rewrite_in_place_with_a_reason(client_as, bob, repo, doc_rewrite):
    client = client_as(bob)
    act = {"kind": "doc", "key": doc_rewrite.pk, "action": "reject"}
    refused = client.post("/inbox/act", act, headers=HTMX)
    assert "A rejection needs a reason." in refused.content.decode()
    doc_rewrite.refresh_from_db()
    assert doc_rewrite.status == DocProposalStatus.PENDING
    done = client.post("/inbox/act", {**act, "reason": "invents a feature"}, headers=HTMX)
    assert f"proposal #{doc_rewrite.pk} rejected; the manifest is kept" in done.content.decode()
    doc_rewrite.refresh_from_db()
    assert (doc_rewrite.status, doc_rewrite.reason) == (DocProposalStatus.REJECTED, "invents a feature")
    assert "Users route." not in repo.read(HOW)
