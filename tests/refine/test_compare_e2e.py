"""Chromium opens a finished run and steps through its passes (htmx swaps, URL kept in sync)."""

import pytest

from tests.factories import UserFactory
from tests.support.refine import PASS_1, make_run, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_it_steps_through_the_passes_of_a_finished_run(page, live_server, login):
    UserFactory(username="alice", role="operator")
    run = make_run(
        reply(PASS_1, "- say --atomic so a failed upgrade undoes itself"),
        reply(PASS_1.replace("five minutes", "ten minutes"), "- give the probes more time"),
        reply(PASS_1.replace("five minutes", "ten minutes"), "- no material issues"),
    )
    assert run.pass_count >= 2
    errors = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    login(page, "alice")
    page.click("nav >> text=Refine")
    page.click(f"a[href='/refine/{run.pk}/']")
    assert page.locator("h1").inner_text() == f"Refine run #{run.pk}"
    assert page.locator("#selected-pass").inner_text() == f"Pass {run.pass_count} of {run.pass_count}"
    assert page.locator("svg.simchart polyline").count() >= 2

    page.click("ol.timeline >> text=Pass 1")
    page.wait_for_url(f"**/refine/{run.pk}/?pass=1")
    assert page.locator("#selected-pass").inner_text() == f"Pass 1 of {run.pass_count}"
    assert "say --atomic" in page.locator("#critique").inner_text()
    assert "atomic" in page.locator(".side-by-side ins").first.inner_text()

    page.click("a[rel=next]")
    page.wait_for_url(f"**/refine/{run.pk}/?pass=2")
    assert page.locator("#selected-pass").inner_text() == f"Pass 2 of {run.pass_count}"
    assert "give the probes more time" in page.locator("#critique").inner_text()
    assert page.locator(".pass > .side-by-side del", has_text="five").count() == 1
    assert page.locator(".pass > .side-by-side ins", has_text="ten").count() == 1

    page.click("a[rel=prev]")
    page.wait_for_url(f"**/refine/{run.pk}/?pass=1")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#use-pass")
    page.wait_for_selector(".messages li.success")
    assert page.locator("#output-pass").inner_text().startswith("pass 1")
    assert not [e for e in errors if "Content Security Policy" in e]
