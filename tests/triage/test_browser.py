"""The triage flow in Chromium: log in, filter the dead tab, open a job, retry it, purge another, run
a bulk retry over a filter and watch the counts change; the keyboard shortcuts."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.cache import cache
from playwright.sync_api import expect

from lessonq.models import Job, JobState
from lessonq.triage.queries import COUNTS_KEY, GROUPS_KEY
from tests.factories import UserFactory
from tests.support.processes import CeleryWorker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.worker]


def dead_count(page: Any) -> int:
    return int(page.locator('[data-count="dead"]').inner_text().lstrip("≈"))


def test_it_triages_the_dlq_in_a_browser(
    page: Any, browser: Any, live_server: Any, login: Any, jobs: Any, bulk_worker: CeleryWorker, settings: Any
) -> None:
    settings.LESSONQ_COUNTS_TTL = 1
    cache.delete_many([COUNTS_KEY, GROUPS_KEY])  # an earlier test's counts may still be within their TTL
    UserFactory(username="alice", role="operator")
    retry_me = jobs(task="index the wiki", error="permanent: wiki index missing")
    purge_me = jobs(task="spam the channel", error="permanent: refused")
    batch = [jobs(task=f"deploy service {i}", agent="deployer", error=f"transient: 503 for pod {i}") for i in range(4)]
    url = live_server.url
    login(page, "alice")

    # Another window watches the counts (polling pauses only while a tab is hidden).
    watcher = browser.new_context().new_page()
    login(watcher, "alice")
    watcher.goto(f"{url}/queue/?tab=dead")
    assert dead_count(watcher) == 6

    # Filter the dead tab by text: htmx swaps the results and the URL keeps the filter.
    page.goto(f"{url}/queue/?tab=dead")
    page.fill("input[data-search]", "wiki")
    page.press("input[data-search]", "Enter")
    page.wait_for_url(re.compile(r"q=wiki"))
    expect(page.locator("#results tr[data-job]")).to_have_count(1)
    page.click(f"#results a[href='/queue/jobs/{retry_me.id}/']")
    page.wait_for_url(f"**/queue/jobs/{retry_me.id}/")
    assert "wiki index missing" in page.locator("pre.bad").inner_text()

    page.click("button[data-retry]")
    page.wait_for_selector("text=sent back to the queue")
    assert page.locator("[data-state]").inner_text() == "pending"
    assert Job.objects.get(pk=retry_me.id).state == JobState.PENDING

    page.goto(f"{url}/queue/jobs/{purge_me.id}/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-purge]")
    page.wait_for_selector(f"text=Job {purge_me.id} purged.")
    assert Job.objects.get(pk=purge_me.id).state == JobState.PURGED

    # Bulk retry over a filter: preview with the count, then the background run with its progress bar.
    page.goto(f"{url}/queue/?tab=dead&agent=deployer")
    page.click("button[data-bulk-filter=retry]")
    assert page.locator("[data-matched]").inner_text() == "4"
    page.click("button[data-start-bulk]")
    page.wait_for_selector("#progress[data-state=done]", timeout=30_000)
    assert page.locator("[data-processed]").inner_text() == "4"
    assert Job.objects.filter(pk__in=[j.id for j in batch], state=JobState.PENDING).count() == 4

    # The watching window's count follows by polling, without a reload.
    expect(watcher.locator('[data-count="dead"]')).to_have_text("0", timeout=25_000)
    watcher.context.close()


def test_it_drives_the_dead_tab_from_the_keyboard(
    page: Any, live_server: Any, login: Any, jobs: Any, queue_dir: Any
) -> None:
    UserFactory(username="alice", role="operator")
    first, second = jobs(task="newest"), jobs(task="older")
    Job.objects.filter(pk=second.id).update(enqueued_at=first.enqueued_at.replace(year=first.enqueued_at.year - 1))
    login(page, "alice")
    page.goto(f"{live_server.url}/queue/?tab=dead")
    page.keyboard.press("?")
    assert page.locator("#kbd-help").is_visible()
    page.keyboard.press("Escape")
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("x")
    assert page.locator("[data-selected-count]").inner_text() == "1 selected"
    assert page.locator("tr.current").get_attribute("data-job") == second.id
    page.keyboard.press("k")
    page.once("dialog", lambda dialog: dialog.dismiss())  # d asks first; dismissed: nothing happens
    page.keyboard.press("d")
    assert Job.objects.get(pk=first.id).state == JobState.DEAD
    page.keyboard.press("r")
    page.wait_for_selector(f"text=Job {first.id} sent back to the queue.")
    assert Job.objects.get(pk=first.id).state == JobState.PENDING
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.hasAttribute('data-search')")


def test_leaving_a_searched_field_does_not_ask_for_the_shown_filter_again(
    page: Any, live_server: Any, login: Any, jobs: Any, queue_dir: Any
) -> None:
    """static/js/app.js: the search field's change on blur (a click on a result does it first) would ask
    for the filter already shown, swap the results and push the same address under the click's
    navigation; only a change that changes the filter is sent."""
    UserFactory(username="alice", role="operator")
    wiki = jobs(task="index the wiki", error="permanent: wiki index missing")
    jobs(task="spam the channel", error="permanent: refused")
    login(page, "alice")
    asked: list[str] = []
    page.on(
        "request",
        lambda r: asked.append(r.url) if r.resource_type in ("xhr", "fetch") and "/queue/?" in r.url else None,
    )
    page.goto(f"{live_server.url}/queue/?tab=dead")
    page.fill("input[data-search]", "wiki")
    page.press("input[data-search]", "Enter")
    page.wait_for_url(re.compile(r"q=wiki"))
    expect(page.locator("#results tr[data-job]")).to_have_count(1)
    page.locator("input[data-search]").blur()  # what the click's mousedown does first
    page.select_option("#id_sort", "oldest")  # a real change: sent (requests go out in event order)
    page.wait_for_url(re.compile(r"sort=oldest"))
    assert [("q=wiki" in url, "sort=oldest" in url) for url in asked] == [(True, False), (True, True)]
    page.click(f"#results a[href='/queue/jobs/{wiki.id}/']")  # the click the duplicate could lose
    page.wait_for_url(f"**/queue/jobs/{wiki.id}/")
