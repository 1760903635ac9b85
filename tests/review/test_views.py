import threading

import pytest
from django.db import connection

from lessonboard.models import AuditEvent
from lessons.models import Lesson
from lessons.review import decisions, memory
from lessons.review.models import MemoryVersion, Proposal
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def add(content, score=0.9, target="memory"):
    return {"target": target, "op": "add", "content": content, "rationale": "because", "score": score}


@pytest.mark.parametrize("persona", ["carol", "alice"])
def test_a_viewer_or_operator_posting_an_approval_gets_403_and_nothing_changes(request, persona, client_as, stage):
    user = request.getfixturevalue(persona)
    (row,) = stage(add("uses pnpm"))
    client = client_as(user)
    denied = client.post(f"/reviews/{row.pk}/approve")
    assert denied.status_code == 403
    assert "This action needs the reviewer or admin role." in denied.content.decode()  # the 403 names the role
    assert client.post(f"/reviews/{row.pk}/reject", {"reason": "no"}).status_code == 403
    assert client.post("/reviews/bulk", {"ids": [row.pk], "action": "approve"}).status_code == 403
    assert client.post(f"/reviews/{row.pk}/release").status_code == 403
    row.refresh_from_db()
    assert row.status == "pending" and row.reserved_by is None
    assert memory.entries_of(row.workspace, "memory") == []
    assert not AuditEvent.objects.filter(action__startswith="review.approve").exists()


def test_the_queue_lists_pending_oldest_first_with_details(bob, client_as, stage):
    stage(add("older fact"), add("newer fact", 0.5))
    page = client_as(bob).get("/reviews/").content.decode()
    assert page.index("older fact") < page.index("newer fact")
    assert "0.50 / 0.70" in page
    assert 'href="/reviews/"' in page  # the nav entry "Reviews" appears for a reviewer


def test_the_queue_partial_answers_htmx_with_a_fragment(bob, client_as, stage):
    stage(add("a fact"), add("a user fact", target="user"))
    body = client_as(bob).get("/reviews/?target=user", headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in body and "a user fact" in body and "a fact<" not in body


def test_opening_a_proposal_shows_diff_budget_neighbours_and_provenance(bob, client_as, stage):
    rows = stage(add("deploy with make deploy"), workspace="acme")
    decisions.approve(rows[0].pk, bob)
    (row,) = stage(
        {
            "target": "memory",
            "op": "replace",
            "old_text": "make deploy",
            "content": "deploy with make release",
            "rationale": "renamed",
            "score": 0.8,
        },
        summary="renamed the deploy target",
    )
    page = client_as(bob).get(f"/reviews/{row.pk}/").content.decode()
    # a replace shows a word diff: only the changed word is struck and inserted
    assert "deploy with make <del>deploy</del>" in page and "deploy with make <ins>release</ins>" in page
    assert "1% — 23/2,200 chars" in page and "1% — 24/2,200 chars" in page
    assert "near duplicate" in page or "related" in page
    assert "renamed the deploy target" in page and "coder" in page
    row.refresh_from_db()
    assert row.reserved_by == bob


def test_it_warns_about_no_match_ambiguity_and_over_budget(bob, client_as, stage, settings):
    settings.USER_CHAR_LIMIT = 10
    rows = stage(
        {"target": "user", "op": "remove", "old_text": "nobody", "score": 0.9},
        add("x" * 11, target="user"),
    )
    client = client_as(bob)
    assert "No entry matches &#x27;nobody&#x27;" in client.get(f"/reviews/{rows[0].pk}/").content.decode()
    assert "Over budget" in client.get(f"/reviews/{rows[1].pk}/").content.decode()


def test_model_text_is_escaped(bob, client_as, stage):
    (row,) = stage(add("<script>alert(1)</script>"))
    page = client_as(bob).get(f"/reviews/{row.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page


def test_a_reviewer_approves_and_the_write_lands_with_an_audit_event(bob, client_as, stage):
    (row,) = stage(add("uses pnpm"))
    response = client_as(bob).post(f"/reviews/{row.pk}/approve")
    assert response.status_code == 302
    row.refresh_from_db()
    assert (row.status, row.decision, row.decided_by, row.message) == ("applied", "approved", bob, "Entry added.")
    assert memory.entries_of(row.workspace, "memory") == ["uses pnpm"]
    assert MemoryVersion.objects.get().actor == "user:bob"
    event = AuditEvent.objects.get(action="review.approve")
    assert event.actor_user == bob and event.object_ids == [str(row.pk)]


def test_an_approval_the_store_refuses_ends_failed_with_its_message(bob, client_as, stage, settings):
    settings.MEMORY_CHAR_LIMIT = 10
    (row,) = stage(add("far too long for the budget"))
    client_as(bob).post(f"/reviews/{row.pk}/approve")
    row.refresh_from_db()
    assert row.status == "failed"
    assert row.message.startswith("Memory at 0/10 chars. Adding this entry (27 chars) would exceed the limit.")
    page = client_as(bob).get(f"/reviews/{row.pk}/").content.decode()
    assert "Memory at 0/10 chars" in page


def test_edit_then_approve_writes_the_edited_text_and_keeps_the_original(bob, client_as, stage):
    (row,) = stage(add("uses npm"))
    client_as(bob).post(f"/reviews/{row.pk}/approve", {"content": "uses pnpm, not npm"})
    row.refresh_from_db()
    assert row.decision == "edited" and row.content == "uses pnpm, not npm" and row.original["content"] == "uses npm"
    assert memory.entries_of(row.workspace, "memory") == ["uses pnpm, not npm"]
    assert AuditEvent.objects.filter(action="review.edit_approve").count() == 1


def test_an_approved_lesson_goes_through_the_lesson_store(bob, client_as, stage):
    (row,) = stage(
        {
            "target": "lesson",
            "op": "add",
            "score": 0.9,
            "lesson": {"situation": "huge file edit", "correction": "use patch"},
        }
    )
    client_as(bob).post(f"/reviews/{row.pk}/approve", {"correction": "use patch mode"})
    lesson = Lesson.objects.get()
    assert lesson.correction == "use patch mode" and lesson.versions.get().actor == "user:bob"


def test_reject_needs_a_reason_and_records_it(bob, client_as, stage):
    (row,) = stage(add("the sky is green"))
    client = client_as(bob)
    client.post(f"/reviews/{row.pk}/reject", {"reason": "  "})
    row.refresh_from_db()
    assert row.status == "pending"
    client.post(f"/reviews/{row.pk}/reject", {"reason": "not true"})
    row.refresh_from_db()
    assert (row.status, row.reason) == ("rejected", "not true")
    assert AuditEvent.objects.get(action="review.reject").reason == "not true"


def test_an_item_held_by_one_reviewer_cannot_be_decided_by_another(bob, client_as, stage):
    dave = UserFactory(username="dave", role="reviewer")
    (row,) = stage(add("uses pnpm"))
    client_as(bob).get(f"/reviews/{row.pk}/")
    page = client_as(dave).get(f"/reviews/{row.pk}/").content.decode()
    assert "Being reviewed by bob" in page
    client_as(dave).post(f"/reviews/{row.pk}/approve")
    row.refresh_from_db()
    assert row.status == "pending" and row.reserved_by == bob


@pytest.mark.django_db(transaction=True)
def test_two_reviewers_racing_for_one_item_one_wins(stage):
    bob = UserFactory(username="bob", role="reviewer")
    dave = UserFactory(username="dave", role="reviewer")
    (row,) = stage(add("uses pnpm"))
    barrier = threading.Barrier(2)
    results: dict[str, str] = {}

    def decide(user):
        barrier.wait()
        try:
            results[user.username] = decisions.approve(row.pk, user).status
        except decisions.DecisionError as exc:
            results[user.username] = exc.message
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(u,)) for u in (bob, dave)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outcomes = sorted(results.values(), key=lambda v: v != "applied")
    assert outcomes[0] == "applied"
    assert "already decided" in outcomes[1]
    assert memory.entries_of(row.workspace, "memory") == ["uses pnpm"]
    assert MemoryVersion.objects.count() == 1
    assert Proposal.objects.get().decided_by.username in results


def test_undo_within_the_grace_period_reverts_the_write(bob, client_as, stage):
    rows = stage(add("one"), add("two"))
    client = client_as(bob)
    client.post(f"/reviews/{rows[0].pk}/approve")
    client.post(f"/reviews/{rows[1].pk}/reject", {"reason": "dup"})
    assert f'action="/reviews/{rows[1].pk}/undo"' in client.get("/reviews/").content.decode()
    client.post(f"/reviews/{rows[0].pk}/undo")
    client.post(f"/reviews/{rows[1].pk}/undo")
    for row in rows:
        row.refresh_from_db()
        assert (row.status, row.decision, row.decided_by) == ("pending", "", None)
    assert memory.entries_of(rows[0].workspace, "memory") == []
    assert [v.action for v in MemoryVersion.objects.order_by("number")] == ["add", "undo"]
    assert AuditEvent.objects.filter(action="review.undo").count() == 2


def test_undo_after_the_grace_period_is_refused(bob, client_as, stage, time_machine, settings):
    settings.REVIEW_UNDO_GRACE = 60
    time_machine.move_to("2030-01-01 00:00:00Z", tick=False)
    (row,) = stage(add("one"))
    client = client_as(bob)
    client.post(f"/reviews/{row.pk}/approve")
    time_machine.move_to("2030-01-01 00:01:00Z", tick=False)
    assert Proposal.objects.get().can_undo()  # at the limit
    time_machine.move_to("2030-01-01 00:01:01Z", tick=False)
    client.post(f"/reviews/{row.pk}/undo")
    row.refresh_from_db()
    assert row.status == "applied"
    assert memory.entries_of(row.workspace, "memory") == ["one"]


def test_bulk_ids_that_are_no_row_ids_are_left_out_not_a_500(bob, client_as):
    for ids in ("²", "1" * 4301):
        response = client_as(bob).post("/reviews/bulk", {"ids": ids, "action": "reject", "reason": "x"})
        assert response.status_code == 302, (ids[:5], response.status_code)


def test_bulk_approve_and_reject_on_a_selection(bob, client_as, stage):
    rows = stage(add("a"), add("b"), add("c"))
    client = client_as(bob)
    client.post("/reviews/bulk", {"ids": [rows[0].pk, rows[1].pk], "action": "approve"})
    client.post("/reviews/bulk", {"ids": [rows[2].pk], "action": "reject", "reason": "noise"})
    assert [r.status for r in Proposal.objects.order_by("position")] == ["applied", "applied", "rejected"]
    assert memory.entries_of(rows[0].workspace, "memory") == ["a", "b"]


def test_the_decisions_page_shows_agreement_with_the_gate_per_target(bob, client_as, stage):
    rows = stage(add("a", 0.9), add("b", 0.9), add("c", 0.2), add("d", 0.9, "user"))
    decisions.approve(rows[0].pk, bob)  # gate would approve: agree
    decisions.reject(rows[1].pk, bob, reason="no")  # gate would approve: disagree
    decisions.reject(rows[2].pk, bob, reason="no")  # gate would reject: agree
    decisions.approve(rows[3].pk, bob)  # agree
    page = client_as(bob).get("/reviews/decisions/").content.decode()
    assert '<tr data-target="memory"><td>Agent notes (MEMORY.md)</td><td>3</td><td>1</td><td>2 (67%)</td></tr>' in page
    assert '<tr data-target="user"><td>User profile (USER.md)</td><td>1</td><td>1</td><td>1 (100%)</td></tr>' in page
    filtered = (
        client_as(bob).get("/reviews/decisions/?decision=rejected", headers={"HX-Request": "true"}).content.decode()
    )
    assert "<html" not in filtered and filtered.count("/reviews/") >= 2 and ">a<" not in filtered


def test_a_hold_expires_after_the_hold_period(bob, client_as, stage, time_machine, settings):
    settings.REVIEW_HOLD = 300
    dave = UserFactory(username="dave", role="reviewer")
    time_machine.move_to("2030-01-01 00:00:00Z", tick=False)
    (row,) = stage(add("uses pnpm"))
    client_as(bob).get(f"/reviews/{row.pk}/")
    time_machine.move_to("2030-01-01 00:04:59Z", tick=False)
    with pytest.raises(decisions.DecisionError, match="being reviewed by bob"):
        decisions.approve(row.pk, dave)
    time_machine.move_to("2030-01-01 00:05:00Z", tick=False)
    assert decisions.approve(row.pk, dave).status == "applied"


def test_the_decisions_page_counts_rejections_per_agent(bob, client_as, stage):
    rows = stage(add("a", 0.9), add("b", 0.9))
    decisions.reject(rows[0].pk, bob, reason="noise")
    page = client_as(bob).get("/reviews/decisions/").content.decode()
    assert "<td>memory</td><td>coder</td><td>2</td><td>1</td><td>1</td>" in page


def test_overview_counts_pending_proposals_once_registered(stage, client_as, carol):
    from lessonboard import overview
    from lessons.review.overview import register

    stage(add("a"), add("b"))
    before = list(overview.SECTIONS)
    try:
        register()
        register()  # idempotent
        page = client_as(carol).get("/").content.decode()
        assert page.count("Proposals waiting for a person") == 1
        assert "<dd>2</dd>" in page
    finally:
        overview.SECTIONS[:] = before


def test_the_queue_lists_doc_rewrites_held_by_a_workspace_gate(client_as, bob):
    from lessonboard.models import Workspace
    from lessons.reflect.models import DocProposal

    ws = Workspace.objects.for_slug("docs-ws")
    doc = DocProposal.objects.create(workspace=ws, manifest={}, files={"AGENTS.md": "x"}, agent="writer")
    body = client_as(bob).get("/reviews/").content.decode()
    assert "Doc rewrites waiting (1)" in body
    assert f"/workspaces/docs-ws/#proposal-{doc.pk}" in body
    DocProposal.objects.filter(pk=doc.pk).update(status="rejected")
    assert "Doc rewrites waiting" not in client_as(bob).get("/reviews/").content.decode()
