"""The compatibility notes quote names and vectors the code must agree with; these are read from the notes
and checked against the code, so a fact edited on one side only fails here."""

from __future__ import annotations

import re

from lessonq import metrics
from lessonq.jobid import job_id
from lessons.content import fact_id
from lessons.reflect import engine
from tests.docs import docset

COMPAT = docset.DOCS / "compat"


def section(path_name: str, anchor: str) -> str:
    """The text of one anchored section: from its ``<a id>`` to the next one."""
    text = (COMPAT / path_name).read_text(encoding="utf-8")
    start = text.index(f'<a id="{anchor}"></a>')
    following = text.find('<a id="', start + 1)
    return text[start : following if following != -1 else len(text)]


def test_the_metric_names_are_the_ones_the_code_registers() -> None:
    documented = set(re.findall(r"`(chatcli_lessonq_[a-z_]+)`", section("chatcli.md", "metrics")))
    # The counters and histogram in metrics.py, the three scrape-time gauges in gauges.py.
    source = "".join(
        (docset.ROOT / "lessonq" / name).read_text(encoding="utf-8") for name in ("metrics.py", "gauges.py")
    )
    registered = set(re.findall(r'"(chatcli_lessonq_[a-z_]+)"', source))
    assert len(documented) == 10 and documented == registered
    assert metrics.ENQUEUE_OUTCOMES == ("accepted", "rejected_full", "deduped", "dropped_oldest")


def test_the_jobid_vectors_match_the_code() -> None:
    rows = [line for line in section("chatcli.md", "test-vectors").splitlines() if re.search(r"\b[0-9a-f]{16}\b", line)]
    checked = 0
    for row in rows:
        first, _, ids = row.strip("|").partition("|")
        fields = re.findall(r"`([^`]*)`", first)
        expected = re.findall(r"`([0-9a-f]{16})`", ids)
        if len(fields) >= 4 and expected:
            task, attempt, outcome, trigger = fields[:4]
            assert job_id(task=task, attempt=attempt, outcome=outcome, trigger=trigger) == expected[0], row
            checked += 1
        elif "all empty" in first:
            assert job_id(task="", attempt="", outcome="", trigger="") == expected[0]
            checked += 1
    assert checked >= 6


def test_the_fact_id_vectors_match_the_code() -> None:
    text = section("chatcli.md", "test-vectors")
    assert "`cf5e87a5bb9b02cc31dd4999`" in text
    assert fact_id("LESSON: A\nMISTAKE: B\nCORRECTION: C\nTRIGGER: manual") == "cf5e87a5bb9b02cc31dd4999"


def test_the_snapshot_hash_vectors_match_the_code() -> None:
    hashes = re.findall(r"`([0-9a-f]{64})`", section("aioson.md", "snapshot-hash"))
    names = engine.BOOTSTRAP_FILES
    assert hashes == [
        engine.snapshot_hash(dict.fromkeys(names, "")),
        engine.snapshot_hash(dict(zip(names, "abcd", strict=True))),
        engine.snapshot_hash({**dict.fromkeys(names, ""), "what-is.md": "café"}),
    ]


def test_the_aioson_commit_messages_are_the_codes() -> None:
    source = (docset.ROOT / "lessons" / "reflect" / "engine.py").read_text(encoding="utf-8")
    table = section("aioson.md", "commit-checks")
    messages = [m for m in re.findall(r"\| `([^`]+)` \| (?:yes|no)", table) if "<p>" not in m]
    assert len(messages) >= 4
    assert [m for m in messages if m not in source] == []
    reasons = re.findall(r"^\d+\. `([^`]+)`", section("aioson.md", "signals"), re.M)
    assert len(reasons) == 10
    fixed = [r.split(" (")[0].split(":")[0].replace("N files", "").strip() for r in reasons]
    assert [r for r in fixed if r not in source] == []
