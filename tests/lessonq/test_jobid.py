"""JobID (docs/compat/chatcli.md#jobid) against the docs/compat/chatcli.md#test-vectors vectors."""

from __future__ import annotations

import pytest

from lessonq.jobid import go_lower, is_job_id, job_id, normalize_task


def jid(task: str, attempt: str, outcome: str, trigger: str) -> str:
    return job_id(task=task, attempt=attempt, outcome=outcome, trigger=trigger)


def test_it_is_16_lowercase_hex_and_stable() -> None:
    a = jid("Edit main.go", "x", "y", "error")
    assert a == jid("Edit main.go", "x", "y", "error")
    assert len(a) == 16 and set(a) <= set("0123456789abcdef") and is_job_id(a)


def test_it_matches_the_spec_vectors() -> None:
    assert jid("Edit main.go", "used full rewrite", "ERROR: file too large", "error") == "bba86ebf380b9dbc"
    assert jid("Edit main.go", "x", "y", "error") == "19fcf5ee83909182"
    assert jid("  edit   main.go  ", "x", "y", "error") == "19fcf5ee83909182"
    assert jid("x", "y", "z", "error") == "b49a3667761dba11"
    assert jid("x", "y", "z", "  ERROR ") == "b49a3667761dba11"
    assert jid("x", "y", "z", "hallucination") == "6fc58493589163d2"
    assert jid("x", "y", "z", "low_quality") == "741c680c5b6869b9"
    assert jid("x", "y", "z", "manual") == "8463757eb1e92d02"
    assert jid("t1", "attempt", "ERROR: x", "error") == "e8feb2353142f8ae"
    assert jid("", "", "", "") == "fccca38774242750"


def test_it_distinguishes_triggers_and_attempts() -> None:
    ids = {jid("x", "y", "z", t) for t in ("error", "hallucination", "low_quality", "manual")}
    assert len(ids) == 4
    assert jid("x", "first attempt", "z", "error") != jid("x", "second attempt", "z", "error")


def test_it_keeps_case_and_inner_spaces_of_attempt_and_outcome() -> None:
    assert jid("t", "A  b", "o", "error") != jid("t", "a b", "o", "error")
    assert jid("t", "  a  ", " o\n", "error") == jid("t", "a", "o", "error")


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("\u00a0Edit\u2003main.go\u3000", "edit main.go"),  # Go's unicode.IsSpace includes these
        ("a\x1cb", "a\x1cb"),  # Python's isspace() would split here; Go does not
        ("İSTANBUL", "istanbul"),  # Go's simple mapping: İ → i (Python's full mapping gives i̇)
        ("ΟΔΟΣ", "οδοσ"),  # no final-sigma context rule
    ],
)
def test_it_uses_gos_whitespace_and_lowercasing(raw: str, normalized: str) -> None:
    assert normalize_task(raw) == normalized


def test_go_lower_is_per_rune() -> None:
    assert go_lower("ÀB") == "àb"


def test_a_lone_surrogate_hashes_like_gos_replacement_character() -> None:
    assert jid("\ud800x", "a", "o", "error") == jid("\ufffdx", "a", "o", "error")
