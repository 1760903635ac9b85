"""The rough edges an operator's walk found, each pinned by a view test (see docs/operations.md#operator-pages)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

from lessonboard.models import AgentToken, AuditEvent
from lessonq.models import JobState
from lessonq.triage.models import BulkAction, BulkItem
from lessons.models import Lesson
from lessons.review import decisions
from lessons.review.models import Proposal
from lessons.review.wording import decided_text
from lessons.store import persist_lesson, persist_manual
from tests.support.refine import make_run, reply

pytestmark = pytest.mark.django_db


def add(content: str, score: float = 0.9, target: str = "memory") -> dict[str, Any]:
    return {"target": target, "op": "add", "content": content, "rationale": "because", "score": score}


# --- 1. reading is not an action ------------------------------------------------------------------------
@pytest.mark.parametrize("persona", ["carol", "alice"])
def test_it_lets_every_role_read_reviews_without_holding_or_deciding(request, persona, client_as, stage):
    user = request.getfixturevalue(persona)
    (row,) = stage(add("uses pnpm"))
    client = client_as(user)
    queue = client.get("/reviews/").content.decode()
    assert "uses pnpm" in queue and 'id="read-only"' in queue
    assert 'name="ids"' not in queue and "Approve selected" not in queue  # no bulk controls for a reader
    page = client.get(f"/reviews/{row.pk}/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "uses pnpm" in body and 'id="approve-form"' not in body and "deciding it needs the reviewer" in body
    assert client.get("/reviews/decisions/").status_code == 200
    row.refresh_from_db()
    assert row.reserved_by is None  # looking does not hold the proposal


def test_it_shows_reviews_and_workspaces_in_every_roles_nav(client_as, carol):
    nav = client_as(carol).get("/").content.decode().split("</nav>")[0]
    assert 'href="/reviews/"' in nav and 'href="/workspaces/"' in nav and 'href="/inbox/"' in nav


def test_it_names_the_role_needed_on_a_403(client_as, carol, jobs):
    job = jobs()
    response = client_as(carol).post(f"/queue/jobs/{job.id}/retry")
    assert response.status_code == 403
    body = response.content.decode()
    assert "This action needs the operator or admin role." in body and "Your role: viewer." in body


# --- 2. the proposal page ------------------------------------------------------------------------------------
def test_it_asks_before_approving_a_write_the_store_will_refuse(bob, client_as, stage):
    (row,) = stage({"target": "memory", "op": "replace", "old_text": "nothing like it", "content": "x", "score": 0.9})
    page = client_as(bob).get(f"/reviews/{row.pk}/").content.decode()
    assert 'id="approve-form" data-confirm="The store will refuse this write' in page


def test_it_lays_out_neighbours_as_a_list_not_a_squeezed_table(bob, client_as, stage):
    first = stage(add("deploy with make deploy"))
    decisions.approve(first[0].pk, bob)
    (row,) = stage(add("deploy with make deploy --force"))
    page = client_as(bob).get(f"/reviews/{row.pk}/").content.decode()
    assert 'class="proposal-layout"' in page and '<ul class="neighbours" id="neighbours">' in page


# --- 3. overview links ---------------------------------------------------------------------------------------
def test_it_links_each_overview_count_to_its_own_tab_or_filter(client_as, carol):
    page = client_as(carol).get("/").content.decode()
    for href in (
        "/queue/?tab=pending",
        "/queue/?tab=retrying",
        "/queue/?tab=dead",
        "/queue/?tab=done",
        "/reviews/decisions/?status=failed",
        "/refine/?rolled_back=yes",
    ):
        assert f'href="{href}"' in page, href


# --- 4. live lists and holds ---------------------------------------------------------------------------------
def test_it_gives_a_hold_back_when_the_reviewer_leaves_the_proposal(bob, client_as, stage):
    (row,) = stage(add("uses pnpm"))
    client = client_as(bob)
    page = client.get(f"/reviews/{row.pk}/").content.decode()
    row.refresh_from_db()
    assert row.reserved_by == bob and f'data-held-until="{row.reserved_until.isoformat()}"' in page
    stale = (row.reserved_until - timedelta(seconds=5)).isoformat()
    assert client.post(f"/reviews/{row.pk}/release", {"held_until": stale}).status_code == 200
    row.refresh_from_db()
    assert row.reserved_by == bob  # a release for an older hold (a reload made a new one) keeps the new one
    assert client.post(f"/reviews/{row.pk}/release", {"held_until": row.reserved_until.isoformat()}).status_code == 204
    row.refresh_from_db()
    assert row.reserved_by is None and row.reserved_until is None


def test_it_polls_the_review_list_and_updates_the_pending_count(bob, client_as, stage):
    stage(add("one"))
    client = client_as(bob)
    page = client.get("/reviews/").content.decode()
    assert 'id="queue-list" data-poll' in page and "every 10s" in page
    stage(add("two"), workspace="beta")
    fragment = client.get("/reviews/", headers={"HX-Request": "true"}).content.decode()
    assert "two" in fragment and 'id="pending-count" hx-swap-oob="true">2 pending' in fragment


# --- 5. lessons list -----------------------------------------------------------------------------------------
def test_it_pages_the_lesson_list_with_a_total(client_as, carol):
    for n in range(55):
        persist_lesson(
            situation=f"lesson number {n} " + "long words " * 40,
            mistake="m",
            correction="c",
            tags=["t"],
            trigger="manual",
            actor="test",
            dedupe=False,
        )
    assert Lesson.objects.count() == 55
    client = client_as(carol)
    first = client.get("/lessons/").content.decode()
    assert "55 lessons match the filters, newest first: 1–50." in first
    assert 'href="?page=2" data-next-page' in first
    assert "long words " * 40 not in first  # a long lesson is clipped, not a wall of bold text
    second = client.get("/lessons/?page=2").content.decode()
    assert "51–55" in second and "lesson number 0 " in second


# --- 6. messages ---------------------------------------------------------------------------------------------
def test_it_says_in_words_what_a_decision_did(bob, stage):
    rows = stage(add("uses pnpm"), add("the sky is green"))
    approved = decisions.approve(rows[0].pk, bob)
    rejected = decisions.reject(rows[1].pk, bob, reason="not true")
    assert decided_text(approved) == f"Approved #{approved.pk}: written to Agent notes (MEMORY.md)."
    assert decided_text(rejected) == f"Rejected #{rejected.pk}: not true"


def test_it_explains_a_store_refusal_without_agent_wording(bob, client_as, stage):
    (row,) = stage({"target": "memory", "op": "remove", "old_text": "kubectl", "score": 0.9})
    client = client_as(bob)
    client.get(f"/reviews/{row.pk}/")
    response = client.post(f"/reviews/{row.pk}/approve", {"stay": "1"}, follow=True)
    body = response.content.decode()
    assert "but the store refused it" in body and "current_entries" not in body


def test_it_says_another_operator_already_retried_the_job(client_as, alice, jobs):
    job = jobs()
    client = client_as(alice)
    client.post(f"/queue/jobs/{job.id}/retry")
    again = client.post(f"/queue/jobs/{job.id}/retry", follow=True).content.decode()
    assert "is no longer dead" in again and "someone already retried or purged it" in again
    assert "dlq entry" not in again


# --- 7. the admin --------------------------------------------------------------------------------------------
def test_it_never_crashes_on_an_admin_add_form(client_as, admin_user):
    client = client_as(admin_user)
    for model in admin.site._registry:
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_add")
        assert client.get(url).status_code in (200, 403), url  # a 500 raises here


def test_it_offers_token_scopes_as_checkboxes(client_as, admin_user):
    client = client_as(admin_user)
    form = client.get("/admin/lessonboard/agenttoken/add/").content.decode()
    assert 'type="checkbox" name="scopes" value="full"' in form
    client.post("/admin/lessonboard/agenttoken/add/", {"name": "ci", "scopes": ["full"]})
    assert AgentToken.objects.get(name="ci").scopes == ["full"]


def test_it_spells_refine_passes(client_as, admin_user):
    index = client_as(admin_user).get("/admin/").content.decode()
    assert "Refine passes" in index and "passs" not in index


# --- 8. controls ---------------------------------------------------------------------------------------------
def test_it_hides_bulk_controls_and_checkboxes_where_nothing_can_be_done(bob, alice, client_as, jobs):
    assert "Approve selected" not in client_as(bob).get("/reviews/").content.decode()  # nothing waits
    assert "Retry selected" not in client_as(alice).get("/queue/?tab=dead").content.decode()  # an empty DLQ
    jobs(state=JobState.RETRY_WAIT)
    retrying = client_as(alice).get("/queue/?tab=retrying").content.decode()
    assert "data-row-check" not in retrying and "data-select-page" not in retrying


# --- 9. links and columns ------------------------------------------------------------------------------------
def test_it_links_a_jobs_lesson(client_as, carol, jobs):
    job = jobs(state=JobState.SUCCEEDED)
    lesson = persist_manual("always pin versions", workspace=None, actor="test").lesson
    job.lesson = lesson
    job.save(update_fields=["lesson"])
    page = client_as(carol).get(f"/queue/jobs/{job.id}/").content.decode()
    assert f'<a href="/lessons/{lesson.pk}/" id="job-lesson">Lesson #{lesson.pk}</a>' in page


def test_it_links_audit_objects_and_shows_results_as_fields(client_as, carol, jobs):
    job = jobs()
    AuditEvent.record("queue.dlq_retry", object_type="queue.job", object_ids=[job.id], result={"sent": "node-a"})
    page = client_as(carol).get("/audit/").content.decode()
    assert f'<a href="/queue/jobs/{job.id}/" data-object-link>{job.id}</a>' in page
    assert "{&#x27;sent&#x27;" not in page and '<span class="muted">sent:</span> node-a' in page


def test_it_names_error_groups_by_their_error_text(client_as, carol, jobs):
    jobs(error="permanent: the model answered with prose")
    page = client_as(carol).get("/queue/groups/").content.decode()
    assert "data-group-error>permanent: the model answered with prose</a>" in page


def test_it_shows_when_dead_jobs_died_and_when_retrying_jobs_retry(client_as, carol, jobs):
    jobs(finished_at=timezone.now() - timedelta(hours=2))
    waiting = jobs(state=JobState.RETRY_WAIT)
    waiting.next_attempt_at = timezone.now() + timedelta(minutes=5)
    waiting.save(update_fields=["next_attempt_at"])
    client = client_as(carol)
    dead = client.get("/queue/?tab=dead").content.decode()
    assert "<th>Died</th>" in dead and "2\xa0hours ago" in dead
    retrying = client.get("/queue/?tab=retrying").content.decode()
    assert "<th>Next retry</th>" in retrying and "in 4\xa0minutes" in retrying


def test_it_says_re_queued_for_a_bulk_retry(client_as, carol, jobs):
    job = jobs()
    action = BulkAction.objects.create(
        kind="retry",
        scope="selection",
        cap=10,
        total=1,
        processed=1,
        succeeded=1,
        state="done",
        finished_at=timezone.now(),
    )
    BulkItem.objects.create(bulk=action, position=0, job_id=job.id, outcome="done")
    page = client_as(carol).get(f"/queue/bulk/{action.pk}/").content.decode()
    assert 'data-outcome="done">re-queued' in page and "1 re-queued" in page


# --- 10. small things ----------------------------------------------------------------------------------------
def test_it_answers_a_get_on_an_action_url_with_a_page(client_as, alice, jobs):
    job = jobs()
    response = client_as(alice).get(f"/queue/jobs/{job.id}/retry")
    assert response.status_code == 405 and "This address is an action" in response.content.decode()


def test_it_says_just_now_instead_of_0_minutes_ago(client_as, carol, jobs):
    jobs(enqueued_at=timezone.now())
    page = client_as(carol).get("/queue/?tab=dead").content.decode()
    assert "just now" in page and "0\xa0minutes ago" not in page


def test_it_offers_an_operator_to_propose_a_refine_pass_as_a_lesson(client_as, alice):
    run = make_run(reply("Deploy with helm upgrade --atomic."), max_passes=1)
    page = client_as(alice).get(f"/refine/{run.pk}/").content.decode()
    assert "Propose pass 1 as a lesson" in page


def test_it_fills_the_content_cell_for_lesson_proposals(bob, client_as, stage):
    (row,) = stage(
        {
            "target": "lesson",
            "op": "add",
            "lesson": {"situation": "running the tests", "mistake": "used pytest", "correction": "use lb.py test"},
            "rationale": "seen",
            "score": 0.9,
        }
    )
    decisions.reject(row.pk, bob, reason="dup")
    page = client_as(bob).get("/reviews/decisions/").content.decode()
    assert '<td data-col="content">running the tests</td>' in page
    assert Proposal.objects.get(pk=row.pk).status == "rejected"


def test_it_retries_a_waiting_job_now(client_as, alice, jobs):
    from lessonq.paths import wal

    waiting = jobs(state=JobState.RETRY_WAIT)
    waiting.next_attempt_at = timezone.now() + timedelta(minutes=5)
    waiting.save(update_fields=["next_attempt_at"])
    wal().append(waiting.wal_job())
    client = client_as(alice)
    page = client.get("/queue/?tab=retrying").content.decode()
    assert f'formaction="/queue/jobs/{waiting.id}/retry-now"' in page
    done = client.post(f"/queue/jobs/{waiting.id}/retry-now", follow=True).content.decode()
    assert "runs now instead of waiting for its next retry" in done
    waiting.refresh_from_db()
    assert waiting.next_attempt_at <= timezone.now() and waiting.dispatched_at is not None
    assert AuditEvent.objects.filter(action="queue.retry_now", object_ids=[waiting.id]).exists()
    again = client.post(f"/queue/jobs/{jobs().id}/retry-now", follow=True).content.decode()
    assert "is not waiting to retry any more (it is dead (DLQ))" in again
