"""Lesson prompt layout and parser (docs/compat/chatcli.md#lesson-generation, docs/compat/chatcli.md#test-vectors)."""

from __future__ import annotations

import pytest

from lessonq.generation import ATTEMPT_LIMIT, LessonParseError, head_tail, messages, parse, user_message


def test_it_lays_out_the_user_message_like_chatcli() -> None:
    text = user_message(task="T", attempt="a" * 1500, outcome="o" * 801, trigger="error")
    assert (
        text
        == f"TASK:\nT\n\nATTEMPT:\n{'a' * 1500}\n\nOUTCOME (why we are reflecting):\n{'o' * 800}...\n\nTRIGGER: error"
    )
    msgs = messages(task="T", attempt="é" * 1600, outcome="x", trigger="manual")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "<skip>nothing actionable</skip>" in msgs[0]["content"]
    assert "characters cut …]" in msgs[1]["content"]


def test_a_long_attempt_reaches_the_generator_as_head_and_tail_with_the_cut_marked() -> None:
    output = "START of the run\n" + "noise line\n" * 2000 + "FAILED tests/test_x.py::test_end - AssertionError\n"
    cut = head_tail(output, ATTEMPT_LIMIT)
    assert len(cut) <= ATTEMPT_LIMIT
    assert cut.startswith("START of the run") and cut.endswith("FAILED tests/test_x.py::test_end - AssertionError\n")
    head, _mark, tail = cut.partition("\n[… ")
    dropped = int(tail.split(" characters cut")[0])
    assert len(head) + dropped + len(tail.split("…]\n", 1)[1]) == len(output)  # the mark says exactly what went
    assert head_tail("short", ATTEMPT_LIMIT) == "short"
    assert "FAILED" in user_message(task="T", attempt=output, outcome="o", trigger="error")


def test_it_parses_a_canned_lesson() -> None:
    lesson = parse(
        "<situation>edit large file</situation><mistake>m</mistake><correction>c</correction><tags>go, edit-file</tags>",
        "error",
    )
    assert lesson is not None
    assert (lesson.situation, lesson.tags, lesson.trigger) == ("edit large file", ["go", "edit-file"], "error")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "<tags>Go, Edit-File, Large</tags><situation>s</situation><correction>c</correction>",
            ["go", "edit-file", "large"],
        ),
        (
            "<tags> Go , ,EDIT-File,go </tags><situation>s</situation><correction>c</correction>",
            ["go", "edit-file", "go"],
        ),
        ("<situation>s</situation><correction>c</correction><tags>a, b", []),
    ],
)
def test_it_normalises_tags(text: str, expected: list[str]) -> None:
    lesson = parse(text, "error")
    assert lesson is not None and lesson.tags == expected


def test_it_follows_the_tolerance_rules() -> None:
    assert parse("<skip></skip><situation>s</situation><correction>c</correction>", "error") is None
    assert parse("<skip>nothing actionable</skip>", "error") is None
    lesson = parse("<situation> a  b </wrong><correction>c</correction>", "error")
    assert lesson is not None and lesson.situation == "a  b"
    lesson = parse("<situation>1</situation><situation>2</situation><correction>c</correction>", "error")
    assert lesson is not None and lesson.situation == "2"
    lesson = parse("<situation>see </b> here</situation><correction>c</correction>", "error")
    assert lesson is not None and lesson.situation == "see"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<situation>x</situation>", "missing required blocks"),
        ("<situation></situation><correction>c</correction>", "missing required blocks"),
        ("<SITUATION>x</SITUATION><CORRECTION>y</CORRECTION>", "no recognized blocks"),
        ("<skip>never closed", "no recognized blocks"),
        ("plain prose", "no recognized blocks"),
    ],
)
def test_it_rejects_unusable_answers(text: str, message: str) -> None:
    with pytest.raises(LessonParseError, match=message):
        parse(text, "error")


def test_a_reply_cut_by_max_tokens_keeps_its_last_block_and_reasoning_never_counts() -> None:
    cut = "<situation>s</situation><correction>c</correction><tags>go, edi"
    assert parse(cut, "error").tags == []  # not cut: chatcli's rule, an unclosed block counts for nothing
    assert parse(cut, "error", truncated=True).tags == ["go", "edi"]
    only_situation = "<situation>long situation that never ends because the budget"
    with pytest.raises(LessonParseError):
        parse(only_situation, "error", truncated=True)
    thought = (
        "<think>maybe <skip>nothing actionable</skip>? no.</think>\n<situation>s</situation><correction>c</correction>"
    )
    assert parse(thought, "error") is not None
    with pytest.raises(LessonParseError, match="refused") as info:
        parse("I'm sorry, but I can't help with that request.", "error")
    assert info.value.reply.startswith("I'm sorry")
