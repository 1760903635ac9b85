"""The runs list, the compare page, choosing a pass, proposing a lesson, and agent modes."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from lessonboard.diff import side_by_side
from lessonboard.models import AuditEvent
from lessons.models import Lesson
from refine.models import AgentRefineMode, RefineRun
from tests.support.refine import ORIGINAL, PASS_1, make_run, reply

pytestmark = pytest.mark.django_db


def test_it_diffs_word_by_word():
    diff = side_by_side("run helm upgrade now", "run helm upgrade --atomic now")
    assert [(s.op, s.text) for s in diff.right] == [
        ("equal", "run helm upgrade "),
        ("ins", "--atomic "),
        ("equal", "now"),
    ]
    assert diff.inserted_words == 1 and diff.deleted_words == 0
    changed = side_by_side("check pods", "check logs")
    assert [(s.op, s.text) for s in changed.left] == [("equal", "check "), ("del", "pods")]
    assert [(s.op, s.text) for s in changed.right] == [("equal", "check "), ("ins", "logs")]


def test_it_diffs_multi_line_drafts_line_first_then_word_by_word():
    a = "# Deploy\n\nrun helm upgrade\ncheck pods\n"
    b = "# Deploy\n\nrun helm upgrade --atomic\ncheck pods\n"
    diff = side_by_side(a, b)
    assert "".join(s.text for s in diff.left) == a and "".join(s.text for s in diff.right) == b
    assert [s.text.strip() for s in diff.right if s.op == "ins"] == ["--atomic"]


def test_it_lists_runs_with_filters_in_the_url(client_as, carol, rolled_back_run):
    converged = make_run(reply(PASS_1), reply(PASS_1), agent="writer")
    RefineRun.objects.filter(pk=converged.pk).update(created_at=timezone.now() - timedelta(days=3))
    client = client_as(carol)
    page = client.get("/refine/")
    assert page.status_code == 200 and f"/refine/{rolled_back_run.pk}/" in page.content.decode()
    only_rolled = client.get("/refine/", {"rolled_back": "yes"}).content.decode()
    assert f"/refine/{rolled_back_run.pk}/" in only_rolled and f"/refine/{converged.pk}/" not in only_rolled
    by_agent = client.get("/refine/", {"agent": "WRITER", "converged": "yes"}, headers={"HX-Request": "true"})
    html = by_agent.content.decode()
    assert "<html" not in html and f"/refine/{converged.pk}/" in html and f"/refine/{rolled_back_run.pk}/" not in html
    today = timezone.localdate().isoformat()
    recent = client.get("/refine/", {"since": today}).content.decode()
    assert f"/refine/{rolled_back_run.pk}/" in recent and f"/refine/{converged.pk}/" not in recent


def test_it_shows_the_refine_nav_entry_and_overview_counts(client_as, carol, rolled_back_run):
    html = client_as(carol).get("/").content.decode()
    assert 'href="/refine/"' in html and "Refine runs" in html


def test_it_compares_a_pass_with_its_predecessor_escaping_model_text(client_as, carol, rolled_back_run):
    client = client_as(carol)
    html = client.get(f"/refine/{rolled_back_run.pk}/", {"pass": 2}).content.decode()
    assert "Pass 2 of 2" in html and "rolled back" in html
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<ins>" in html and "<del>" in html
    assert "too long" in html  # the critique bullet beside the change
    assert '<svg class="simchart"' in html and "series-original-char" in html
    assert "style=" not in html and "<script>" not in html.split("</head>")[1]
    first = client.get(f"/refine/{rolled_back_run.pk}/", {"pass": 1}, headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in first and 'id="compare"' in first and "say --atomic" in first
    assert re.search(r"<ins>[^<]*--atomic[^<]*</ins>", first)
    assert client.get(f"/refine/{rolled_back_run.pk}/", {"pass": 9}).status_code == 404


def test_it_hides_actions_a_viewer_may_not_take(client_as, carol, rolled_back_run):
    html = client_as(carol).get(f"/refine/{rolled_back_run.pk}/").content.decode()
    assert 'id="use-pass"' not in html and "Propose as a lesson" not in html


def test_it_lets_an_operator_use_another_pass_and_refuses_a_viewer(client_as, alice, carol, rolled_back_run):
    url = f"/refine/{rolled_back_run.pk}/use/2"
    assert client_as(carol).post(url).status_code == 403
    assert RefineRun.objects.get(pk=rolled_back_run.pk).output_pass == 1
    response = client_as(alice).post(url)
    assert response.status_code == 302
    run = RefineRun.objects.get(pk=rolled_back_run.pk)
    assert run.output_pass == 2 and run.final_output == run.passes.get(number=2).revised
    assert AuditEvent.objects.filter(action="refine.choose_output", actor_user=alice).exists()
    assert client_as(alice).post(f"/refine/{rolled_back_run.pk}/use/7").status_code == 404


def test_it_proposes_a_pass_as_a_lesson_into_the_approval_queue(client_as, alice, bob, carol, rolled_back_run):
    from lessons.review import decisions
    from lessons.review.models import Proposal

    url = f"/refine/{rolled_back_run.pk}/passes/1/lesson"
    data = {
        "situation": "deploying with helm",
        "mistake": "no --atomic",
        "correction": "use --atomic",
        "tags": "Helm, deploy",
    }
    assert client_as(carol).post(url, data).status_code == 403
    assert not Proposal.objects.exists()
    assert client_as(alice).post(url, data).status_code == 302
    proposal = Proposal.objects.get()
    assert (proposal.status, proposal.target, proposal.op, proposal.workspace.slug) == (
        "pending",
        "lesson",
        "add",
        "refine",
    )
    assert proposal.lesson["situation"] == "deploying with helm" and proposal.agent == "coder"
    assert Lesson.objects.count() == 0  # nothing is written before a reviewer decides
    decisions.approve(proposal.pk, bob)
    lesson = Lesson.objects.get()
    assert lesson.situation == "deploying with helm" and lesson.tags[:2] == ["helm", "deploy"]
    bad = client_as(alice).post(url, {"situation": ""})
    assert bad.status_code == 302 and Proposal.objects.count() == 1


def test_it_sets_agent_modes_from_the_page(client_as, alice, carol):
    assert client_as(carol).post("/refine/modes/", {"agent": "coder", "mode": "off"}).status_code == 403
    assert not AgentRefineMode.objects.exists()
    assert client_as(alice).post("/refine/modes/", {"agent": "Coder", "mode": "once"}).status_code == 302
    assert AgentRefineMode.objects.get().mode == "once"
    assert client_as(alice).post("/refine/modes/", {"agent": "coder", "mode": "always"}).status_code == 400
    html = client_as(carol).get("/refine/modes/").content.decode()
    assert "coder" in html and "Set a mode" not in html


def test_the_modes_page_sets_and_shows_a_workspaces_own_mode(client_as, alice):
    """Modes are per (workspace, agent): what a bound token set for its workspace's agent is shown with that
    workspace, and a person can change that mode, not only the workspace-less pool's."""
    from lessonboard.models import Workspace
    from refine import runs

    shop = Workspace.objects.for_slug("shop")
    runs.set_mode("coder", "on", workspace=shop)
    page = client_as(alice)
    assert page.post("/refine/modes/", {"agent": "coder", "workspace": "shop", "mode": "off"}).status_code == 302
    assert AgentRefineMode.objects.mode_for("coder", shop) == "off"
    assert AgentRefineMode.objects.mode_for("coder") == "auto"  # the pool's own is untouched
    html = page.get("/refine/modes/").content.decode()
    assert "<td>shop</td>" in html
    assert page.post("/refine/modes/", {"agent": "coder", "workspace": "nowhere", "mode": "off"}).status_code == 400


def test_it_polls_a_run_in_flight_and_stops_when_it_is_done(client_as, carol):
    run = RefineRun.objects.create(task="t", original_draft=ORIGINAL, agent="coder")
    client = client_as(carol)
    html = client.get(f"/refine/{run.pk}/").content.decode()
    assert "data-poll" in html and "still queued" in html
    fragment = client.get(f"/refine/{run.pk}/", {"part": "body"}, headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="run-body"') and "data-poll" in fragment


def test_it_sends_anonymous_visitors_to_login(client):
    response = client.get("/refine/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
