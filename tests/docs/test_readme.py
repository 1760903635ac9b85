"""The README stays a two-minute read that starts with the two commands."""

from __future__ import annotations

import re

from tests.docs import docset

README = docset.ROOT / "README.md"


def test_the_first_commands_are_serve_and_test() -> None:
    first_block = re.search(r"^```\w*\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)
    assert first_block is not None
    assert first_block.group(1).splitlines() == ["python3 lb.py serve", "python3 lb.py test"]


def test_it_stays_short_and_links_every_doc() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 190  # the tour's step 4 shows an outage and a dead job
    linked = {link.target.split("#")[0] for link in docset.links(README)}
    pages = {docset.rel(p) for p in docset.DOCS.rglob("*.md")}
    assert sorted(pages - linked) == [], "every page under docs/ is reachable from the README"
