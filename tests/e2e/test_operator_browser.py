"""An operator's day in Chromium: the inbox from the keyboard, holds released on leaving a proposal, one
keyboard help, polling that pauses while the tab is hidden, the queue cursor kept after an action."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from lessonq.models import Job, JobState
from lessons.review.models import Proposal
from tests.factories import UserFactory
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def add(content: str, score: float = 0.9) -> dict[str, Any]:
    return {"target": "memory", "op": "add", "content": content, "rationale": "because", "score": score}


def test_it_works_the_inbox_from_the_keyboard(page, live_server, login, stage):
    UserFactory(username="bob", role="reviewer")
    older, newer = stage(add("the sky is green"), add("uses pnpm"))
    login(page, "bob")
    page.goto(live_server.url + "/inbox/")
    page.wait_for_selector("body[data-keys=ready] tr.current")
    expect(page.locator("#nav-inbox-count")).to_have_text("2")
    assert page.locator("tr.current").get_attribute("data-key") == str(newer.pk)  # newest first
    page.keyboard.press("a")  # approve the row under the cursor, in place
    expect(page.locator(f"#inbox-proposal-{newer.pk}")).to_contain_text(f"Approved #{newer.pk}")
    assert page.url.endswith("/inbox/")  # no navigation
    page.keyboard.press("j")
    page.keyboard.press("r")  # focuses the reason of the proposal
    page.keyboard.type("not true")
    page.keyboard.press("Enter")
    expect(page.locator(f"#inbox-proposal-{older.pk}")).to_contain_text(f"Rejected #{older.pk}: not true")
    expect(page.locator("#nav-inbox-count")).to_have_text("0")
    assert Proposal.objects.get(pk=newer.pk).status == "applied"
    assert Proposal.objects.get(pk=older.pk).status == "rejected"


def test_it_gives_the_hold_back_when_paging_past_a_proposal(page, live_server, login, stage):
    UserFactory(username="bob", role="reviewer")
    first, second, _ = stage(add("one fact"), add("two fact"), add("three fact"))
    login(page, "bob")
    page.goto(f"{live_server.url}/reviews/{first.pk}/")
    page.wait_for_selector("body[data-keys=ready]")
    assert Proposal.objects.get(pk=first.pk).reserved_by is not None
    page.keyboard.press("j")
    page.wait_for_url(f"**/reviews/{second.pk}/")
    wait_for(lambda: Proposal.objects.get(pk=first.pk).reserved_by is None, timeout=10, what="hold released")
    assert Proposal.objects.get(pk=second.pk).reserved_by is not None  # the open one is held


def test_it_opens_the_same_keyboard_help_everywhere_and_esc_closes_it(page, live_server, login, jobs):
    UserFactory(username="root", role="admin")
    login(page, "root")
    for path in ("/reviews/", "/queue/?tab=dead", "/inbox/"):
        page.goto(live_server.url + path)
        page.keyboard.press("?")
        expect(page.locator("dialog#kbd-help")).to_be_visible()
        page.keyboard.press("Escape")
        expect(page.locator("dialog#kbd-help")).to_be_hidden()


def test_it_asks_before_approving_a_write_the_store_will_refuse(page, live_server, login, stage):
    UserFactory(username="bob", role="reviewer")
    (row,) = stage({"target": "memory", "op": "replace", "old_text": "nothing", "content": "uses pnpm", "score": 0.9})
    login(page, "bob")
    page.goto(f"{live_server.url}/reviews/{row.pk}/")
    page.wait_for_selector("body[data-keys=ready]")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.keyboard.press("a")
    wait_for(lambda: asked, timeout=5, what="the confirmation")
    assert "The store will refuse this write" in asked[0]
    assert Proposal.objects.get(pk=row.pk).status == "pending"
    page.keyboard.press("e")  # e edits the content, not old_text
    assert page.evaluate("document.activeElement.id") == "edit-content"


def test_it_pauses_polling_while_the_tab_is_hidden(page, live_server, login):
    UserFactory(username="carol", role="viewer")
    login(page, "carol")
    page.goto(live_server.url + "/")
    page.evaluate(
        "Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});"
        "document.body.dispatchEvent(new CustomEvent('visible-again'));"
    )
    expect(page.locator("#counts")).to_have_attribute("data-poll-skipped", "1")
    expect(page.locator("#charts")).to_have_attribute("data-poll-skipped", "1")  # the charts too
    with page.expect_response(
        lambda r: r.url == live_server.url + "/" and r.request.headers.get("hx-request") == "true"
    ):
        page.evaluate(
            "Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});"
            "document.dispatchEvent(new Event('visibilitychange'));"
        )


def test_it_shows_disabled_buttons_as_disabled_and_keeps_the_cursor_after_a_retry(page, live_server, login, jobs):
    UserFactory(username="alice", role="operator")
    made = [jobs(task=f"task {i}") for i in range(3)]
    login(page, "alice")
    page.goto(live_server.url + "/queue/?tab=dead")
    selected = page.locator("button[data-needs-selection]").first
    expect(selected).to_be_disabled()
    colour = selected.evaluate("b => getComputedStyle(b).backgroundColor")
    enabled = page.locator("button[data-bulk-filter=retry]").evaluate("b => getComputedStyle(b).backgroundColor")
    accent = page.locator("button[type=submit]", has_text="Filter").evaluate("b => getComputedStyle(b).backgroundColor")
    assert colour not in (enabled, accent)
    page.keyboard.press("j")
    page.keyboard.press("j")
    second_id = page.locator("tr.current").get_attribute("data-job")
    rows_before = page.locator("#results tr[data-job]").evaluate_all("rows => rows.map(r => r.dataset.job)")
    page.keyboard.press("r")
    page.wait_for_selector("body[data-cursor=restored]")
    assert Job.objects.get(pk=second_id).state == JobState.PENDING
    # the cursor sits where the retried job was: on the job that followed it
    assert page.locator("tr.current").get_attribute("data-job") == rows_before[2]
    assert len(made) == 3


def test_it_hints_at_new_rows_when_the_open_tabs_count_changes(page, live_server, login, jobs):
    from lessonq.triage import queries as triage

    UserFactory(username="alice", role="operator")
    jobs(task="first")
    login(page, "alice")
    page.goto(live_server.url + "/queue/?tab=dead")
    expect(page.locator("#new-rows")).to_be_hidden()
    jobs(task="second")
    triage.forget_counts()
    with page.expect_response(lambda r: "/queue/counts" in r.url):
        page.evaluate("document.body.dispatchEvent(new CustomEvent('visible-again'))")  # what the poll does
    expect(page.locator("#new-rows")).to_be_visible()
    expect(page.locator("#new-rows")).to_contain_text("1 new since the list was loaded")
    assert page.locator("#results tr[data-job]").count() == 1  # rows stay put under the cursor
    page.click("[data-refresh-rows]")
    expect(page.locator("#results tr[data-job]")).to_have_count(2)


def test_it_renders_the_operator_pages_without_script_errors_or_csp_violations(page, live_server, login, queue_dir):
    from django.core.management import call_command

    call_command("demo")
    UserFactory(username="root", role="admin")
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    login(page, "root")
    proposal = Proposal.objects.pending().first()
    for path in (
        "/",
        "/?window=7d",
        "/inbox/",
        f"/reviews/{proposal.pk}/",
        "/reviews/",
        "/queue/?tab=retrying",
        "/lessons/",
    ):
        page.goto(live_server.url + path)
        page.wait_for_load_state("load")
    assert problems == []
