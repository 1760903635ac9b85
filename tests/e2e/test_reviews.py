import pytest

from lessons.review.learning import Verdict
from lessons.review.staging import run_review
from tests.factories import UserFactory, WorkspaceFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def hold(proposal):
    return Verdict("hold", "waits for a person", gate="human", auto_approve=proposal.score >= 0.7)


def test_a_reviewer_approves_edits_and_rejects_from_the_keyboard(page, live_server, login, agent_token):
    UserFactory(username="bob", role="reviewer")
    ws = WorkspaceFactory(slug="acme")
    proposals = [
        {"target": "memory", "op": "add", "content": "tests run with lb.py test", "rationale": "seen", "score": 0.9},
        {"target": "memory", "op": "add", "content": "uses npm", "rationale": "seen", "score": 0.6},
        {"target": "memory", "op": "add", "content": "the sky is green", "rationale": "guess", "score": 0.2},
    ]
    run_review(ws, "fixed the runner", agent="coder", proposer=lambda s: proposals, gate=hold)
    token = agent_token("e2e", "full")

    login(page, "bob")
    page.click("nav a:has-text('Reviews')")
    assert page.locator("#pending-count").inner_text() == "3 pending"
    page.wait_for_selector("body[data-keys=ready] tr.selected")
    rows = page.locator("[data-review-row]")
    assert rows.first.inner_text().count("tests run with lb.py test") == 1  # oldest first
    page.keyboard.press("o")
    page.wait_for_url("**/reviews/*/")
    page.wait_for_selector("body[data-keys=ready]")
    assert "tests run with lb.py test" in page.locator("#proposal-content").inner_text()
    page.keyboard.press("a")  # approve → the next pending proposal opens
    page.locator("#proposal-content", has_text="uses npm").wait_for()  # no eval: the page's CSP forbids it
    page.wait_for_selector("body[data-keys=ready]")
    assert page.locator("#undo-form").count() == 1
    page.keyboard.press("e")
    page.fill("#edit-content", "uses pnpm, never npm")
    page.keyboard.press("Control+Enter")
    page.locator("#proposal-content", has_text="the sky is green").wait_for()  # no eval: the page's CSP forbids it
    page.wait_for_selector("body[data-keys=ready]")
    page.keyboard.press("r")
    page.keyboard.type("not true")
    page.keyboard.press("Enter")
    page.wait_for_url("**/reviews/")
    assert page.locator("#queue-empty").count() == 1

    response = page.request.get(
        live_server.url + "/api/v1/memory/memory?workspace=acme", headers={"Authorization": f"Bearer {token}"}
    )
    body = response.json()
    assert body["entries"] == ["tests run with lb.py test", "uses pnpm, never npm"]
    assert body["snapshot"].split("\n")[1].startswith("MEMORY (your personal notes) [")

    page.goto(live_server.url + "/reviews/decisions/")
    history = page.locator("#history").inner_text()
    assert "not true" in history and "edited and approved" in history
