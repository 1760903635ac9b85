"""Links and anchors cannot rot: every relative link in README.md and docs/, and every ``docs/….md#anchor``
cited in code comments and docstrings, resolves to a file and an anchor that exist."""

from __future__ import annotations

import re

from tests.docs import docset


def test_it_resolves_every_relative_link_and_anchor_in_the_docs() -> None:
    links = [link for path in docset.doc_files() for link in docset.links(path)]
    assert len(links) > 50  # the parser really finds the links
    broken = [f"{link} — {docset.broken(link)}" for link in links if docset.broken(link)]
    assert broken == []


def test_it_resolves_every_docs_citation_in_the_code() -> None:
    citations = docset.code_citations()
    assert any(c.doc == "docs/compat/chatcli.md" and c.fragment == "jobid" for c in citations)
    problems = []
    for citation in citations:
        target = docset.ROOT / citation.doc
        if not target.exists():
            problems.append(f"{citation} — no such file")
        elif citation.fragment and citation.fragment not in docset.anchors(target):
            problems.append(f"{citation} — no such anchor")
    assert problems == []


def test_it_refers_to_nothing_outside_the_repository() -> None:
    """No path into a sibling checkout, no outside specification (its section numbers, or "the spec"), no
    tracker issue numbers or notes."""
    outside = re.compile(
        r"\.\./shared|\bspec §|\b[Ii]ssues? #?\d+\b|\bARCHITECTURE\.md\b|(?i:\bthe spec\b|\bissues? notes?\b)"
    )
    hits = []
    for path in docset.repo_files():  # every text file, scripts without a suffix (.ci/run) included
        if path == docset.ROOT / "tests" / "docs" / "test_links.py":
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # images and other binaries
        for number, line in enumerate(text.splitlines(), 1):
            if outside.search(line):
                hits.append(f"{docset.rel(path)}:{number}: {line.strip()[:120]}")
    assert hits == []


def test_it_computes_github_anchors_for_headings_and_explicit_ids(tmp_path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text(
        '# Dedupe, reinforce, supersede\n<a id="jobid"></a>\n## `/reflect`\n## Repeat\n## Repeat\n'
        "```\n# not a heading\n```\n"
    )
    assert docset.anchors(doc) == {"dedupe-reinforce-supersede", "jobid", "reflect", "repeat", "repeat-1"}


def test_it_reports_a_missing_file_a_missing_anchor_and_an_escape() -> None:
    readme = docset.ROOT / "README.md"
    assert docset.broken(docset.Link(readme, 1, "docs/compat/chatcli.md#jobid")) == ""
    assert docset.broken(docset.Link(readme, 1, "docs/compat/chatcli.md#nope")).startswith("no anchor #nope")
    assert docset.broken(docset.Link(readme, 1, "docs/nope.md")) == "no such file"
    assert docset.broken(docset.Link(readme, 1, "../")) == "points outside the repository"
    assert docset.broken(docset.Link(readme, 1, "https://example.com/x#y")) == ""
