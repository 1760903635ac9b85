"""The screenshots in docs/img are taken by this browser test from today's pages, so the README never
shows a page that no longer looks like that. Each image has a recipe: the data it needs and the page.

Every run takes the shot (so a recipe that no longer renders fails); it replaces the file in docs/img only
with ``LESSONBOARD_UPDATE_SCREENSHOTS=1``, so a test run leaves the work tree clean (docs/testing.md)."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.docs import docset
from tests.factories import UserFactory
from tests.support.queue import make_job

IMG = docset.DOCS / "img"


def dead_jobs() -> str:
    """A dead-letter queue a team would recognise: a provider outage, parser failures, one of each."""
    for n in range(4):
        make_job(
            task=f"Deploy the checkout service to staging ({n + 1}/4)",
            agent="deployer",
            error="Error code: 503 - upstream model server unavailable",
            attempts=5,
        )
    make_job(
        task="Edit main.go: split the handler into smaller functions",
        agent="coder",
        error="lesson parser: missing required blocks (situation, correction)",
    )
    make_job(
        task="Summarise the failing integration tests",
        agent="tester",
        trigger="hallucination",
        error="lesson parser: no recognized blocks in response",
    )
    make_job(task="Rename the billing module", agent="coder", error="Error code: 429 - rate limited", attempts=5)
    return "/queue/"


def demo_data(path: str) -> Callable[[], str]:
    def make() -> str:
        from django.core.management import call_command

        call_command("demo", stdout=io.StringIO())
        return path

    return make


DESKTOP = {"width": 1280, "height": 1000}
PHONE = {"width": 390, "height": 844}  # a common phone's viewport

# image name → a function that makes its data and returns the page to photograph, and the viewport
SHOTS: dict[str, tuple[Callable[[], str], dict[str, int]]] = {
    "queue.png": (dead_jobs, DESKTOP),
    "phone-overview.png": (demo_data("/"), PHONE),
    "phone-queue.png": (dead_jobs, PHONE),
    "phone-inbox.png": (demo_data("/inbox/"), PHONE),
}


def referenced_images() -> set[str]:
    return {
        Path(link.target).name
        for path in docset.doc_files()
        for link in docset.links(path)
        if (link.source.parent / link.target).resolve().parent == IMG.resolve()
    }


def test_every_image_in_the_docs_has_a_recipe_and_every_recipe_is_used() -> None:
    assert referenced_images() == set(SHOTS)
    stale = {p.name for p in IMG.glob("*")} - set(SHOTS)
    assert stale == set(), "images nothing produces any more"


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", sorted(SHOTS))
def test_it_takes_the_screenshot_from_the_live_page(
    name: str,
    browser: Any,
    live_server: Any,
    login: Any,
    queue_dir: Path,
    tmp_path: Path,
) -> None:
    from django.core.cache import cache

    cache.clear()  # the demo banner's state of an earlier shot is cached
    UserFactory(username="alice", role="operator")
    recipe, viewport = SHOTS[name]
    path = recipe()
    phone = viewport == PHONE
    context = browser.new_context(viewport=viewport, device_scale_factor=1, is_mobile=phone, has_touch=phone)
    page = context.new_page()
    try:
        login(page, "alice")
        page.goto(live_server.url + path)
        page.wait_for_load_state("networkidle")
        assert page.locator("h1").count() == 1
        # a phone's shot shows the page as it fits the phone: nothing wider than the screen
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        shot = tmp_path / name
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("LESSONBOARD_UPDATE_SCREENSHOTS") == "1":
            IMG.mkdir(exist_ok=True)
            shutil.copyfile(shot, IMG / name)
    finally:
        context.close()
