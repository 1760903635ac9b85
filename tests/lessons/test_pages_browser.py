"""In Chromium: live search, open a lesson, edit it, restore the previous version."""

import pytest

from lessons import vectors
from lessons.models import Lesson
from lessons.store import persist_lesson
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_it_lets_a_reviewer_search_open_edit_and_restore_a_lesson(page, live_server, login):
    UserFactory(username="bob", role="reviewer")
    lesson = persist_lesson(
        situation="bulk calls to the payments API",
        mistake="retried immediately after HTTP 429",
        correction="back off exponentially with jitter",
        tags=["rate-limit", "429"],
        trigger="error",
    ).lesson
    persist_lesson(
        situation="resolving a merge conflict",
        mistake="left markers",
        correction="grep for markers",
        tags=["git"],
        trigger="error",
    )
    vectors.embed_pending()

    login(page, "bob")
    page.goto(live_server.url + "/lessons/")
    page.fill("#id_q", "payments API keeps answering 429")  # live search: no submit
    result = page.locator("#results article").first
    result.locator("mark", has_text="payments").wait_for()
    page.wait_for_url("**/lessons/?*q=payments*")  # the query is in the URL
    assert "bulk calls to the payments API" in result.inner_text()
    result.locator("summary").click()
    assert result.locator(".why td", has_text="vector").count() == 1

    result.locator(f"a[href='/lessons/{lesson.pk}/']").click()
    page.wait_for_url(f"**/lessons/{lesson.pk}/")
    assert "CORRECTION: back off exponentially with jitter" in page.locator("#lesson-content").inner_text()

    page.click("text=Edit")
    page.fill("#id_correction", "honour Retry-After, then back off")
    page.fill("#id_reason", "Retry-After first")
    page.click("button:has-text('Save as a new version')")
    page.wait_for_url(f"**/lessons/{lesson.pk}/")
    assert "CORRECTION: honour Retry-After, then back off" in page.locator("#lesson-content").inner_text()
    assert page.locator("#history .version").count() == 2

    page.on("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('Restore v1')")
    page.locator(".messages", has_text="Version 1 restored").wait_for()
    assert "CORRECTION: back off exponentially with jitter" in page.locator("#lesson-content").inner_text()
    assert page.locator("#history .version").count() == 3
    lesson.refresh_from_db()
    assert lesson.correction == "back off exponentially with jitter"
    assert list(Lesson.objects.get(pk=lesson.pk).versions.order_by("number").values_list("action", flat=True)) == [
        "create",
        "edit",
        "restore",
    ]
