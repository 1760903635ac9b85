"""A phone (390×844) can use every page of the nav: no page is wider than the
screen (wide tables scroll inside their own box), and every nav link can be reached — behind the menu
button when the nav is collapsed."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from lessonq.models import Job
from lessons.review.models import Proposal
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

PHONE = {"width": 390, "height": 844}

# How far the page's content reaches beyond the viewport (0 when it fits).
OVERFLOW = "() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth) - window.innerWidth"


def too_wide(page: Any) -> list[str]:
    """The elements whose right edge is past the screen, for the failure message."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('body *')).filter(e => {
             const r = e.getBoundingClientRect();
             if (r.width === 0 || r.right <= window.innerWidth + 1) return false;
             for (let p = e.parentElement; p; p = p.parentElement) {  // inside a box that scrolls: fine
               const o = getComputedStyle(p).overflowX;
               if (o === 'auto' || o === 'scroll' || o === 'hidden') return false;
             }
             return true;
           }).slice(0, 8).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
             + (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ').join('.') : '')
             + ' right=' + Math.round(e.getBoundingClientRect().right))"""
    )


def reachable_links(page: Any) -> dict[str, str]:
    """Open the menu if the nav is collapsed; every nav link must then be on screen. Returns label → href."""
    toggle = page.locator("#menu-toggle")
    if toggle.is_visible():
        toggle.click()
        expect(toggle).to_have_attribute("aria-expanded", "true")
    links = page.locator("#main-nav a")
    found: dict[str, str] = {}
    for i in range(links.count()):
        link = links.nth(i)
        label = link.inner_text().strip().split()[0]
        expect(link).to_be_visible()
        box = link.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"] + 1, (
            f"nav link {label} is off screen: {box}"
        )
        found[label] = link.get_attribute("href")
    logout = page.locator("form.logout button")
    expect(logout).to_be_visible()
    box = logout.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"] + 1, "Log out is off screen"
    return found


def test_every_nav_page_fits_a_phone_and_every_nav_link_can_be_reached(browser, live_server, login, queue_dir):
    call_command("demo")  # pages with rows in them: a job, lessons, proposals, a refine run, audit events
    UserFactory(username="root", role="admin")
    context = browser.new_context(viewport=PHONE, device_scale_factor=1, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        login(page, "root")
        page.goto(live_server.url + "/")
        nav = reachable_links(page)
        assert {"Overview", "Lessons", "Queue", "Inbox", "Reviews", "Refine", "Workspaces", "Audit", "Admin"} <= set(
            nav
        )
        proposal = Proposal.objects.pending().first()
        job = Job.objects.filter(state="dead").first()
        extra = [f"/reviews/{proposal.pk}/", f"/queue/jobs/{job.pk}/", "/queue/?tab=dead", "/queue/groups/"]
        extra += ["/running/", "/schedules/"]
        problems: list[str] = []
        for path in [*nav.values(), *extra]:
            page.goto(live_server.url + path)
            page.wait_for_load_state("load")
            overflow = page.evaluate(OVERFLOW)
            if overflow > 0:
                problems.append(f"{path}: {overflow}px wider than the screen: {too_wide(page)}")
            if path in nav.values() and not path.startswith("/admin/"):  # Django's admin has its own header
                assert set(reachable_links(page)) == set(nav), path
        assert problems == []
    finally:
        context.close()


def test_the_menu_button_is_hidden_on_a_desktop(page, live_server, login):
    UserFactory(username="carol", role="viewer")
    page.set_viewport_size({"width": 1280, "height": 900})
    login(page, "carol")
    expect(page.locator("#menu-toggle")).to_be_hidden()
    expect(page.locator("#main-nav a", has_text="Queue")).to_be_visible()
