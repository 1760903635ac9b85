"""Every parser of model text over a corpus of replies as real models write them (tests/data/model_replies.jsonl:
GPT-4o, Claude, Llama, Qwen, DeepSeek-R1 with ``<think>``, Mistral; refusals; replies cut by max_tokens), each
with the parse or the refusal it must give."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lessonboard import llm
from lessonboard.llm import replies
from lessonq.generation import LessonParseError
from lessonq.generation import parse as parse_lesson
from lessons.retrieval import parse_hyde
from lessons.review.proposer import ProposerError
from lessons.review.proposer import parse_reply as parse_proposals
from refine.refiner import parse_reply as parse_refine

CORPUS = [json.loads(line) for line in (Path(__file__).parents[1] / "data" / "model_replies.jsonl").open()]


def test_the_corpus_covers_every_style_parser_refusals_and_truncations() -> None:
    assert len(CORPUS) >= 40
    assert {e["style"] for e in CORPUS} >= {"gpt-4o", "claude", "llama", "qwen", "deepseek-r1", "mistral"}
    assert {e["parser"] for e in CORPUS} == {"lesson", "refine", "proposer", "hyde"}
    assert sum("refused" in e.get("expect_error", "") for e in CORPUS) >= 3
    assert sum(e["finish_reason"] == "length" for e in CORPUS) >= 8
    assert sum("<think>" in e["reply"] or "</think>" in e["reply"] for e in CORPUS) >= 8
    assert len({e["id"] for e in CORPUS}) == len(CORPUS)


def _run(entry: dict[str, Any]) -> Any:
    reply, parser = entry["reply"], entry["parser"]
    if parser == "lesson":
        return parse_lesson(reply, "error", truncated=entry["finish_reason"] == "length")
    if parser == "refine":
        return parse_refine(reply)
    if parser == "proposer":
        return parse_proposals(reply)
    return parse_hyde(reply)


@pytest.mark.parametrize("entry", CORPUS, ids=[e["id"] for e in CORPUS])
def test_every_parser_reads_the_reply_as_expected(entry: dict[str, Any]) -> None:
    if "expect_error" in entry:
        with pytest.raises((LessonParseError, ProposerError, llm.PermanentLLMError)) as info:
            _run(entry)
        assert entry["expect_error"] in str(info.value)
        return
    got, expect = _run(entry), entry["expect"]
    parser = entry["parser"]
    if parser == "lesson":
        if expect.get("skip"):
            assert got is None
        else:
            assert got is not None
            assert (got.situation, got.correction, got.tags) == (
                expect["situation"],
                expect["correction"],
                expect["tags"],
            )
    elif parser == "refine":
        assert got.protocol_ok == expect["protocol_ok"]
        if "output" in expect:
            assert got.output == expect["output"]
        if "bullets" in expect:
            assert len(got.bullets) == expect["bullets"]
    elif parser == "proposer":
        assert len(got) == expect["count"]
        if expect["count"]:
            assert got[0]["target"] == expect["first_target"] and got[0]["content"]
    else:
        assert got == expect["text"]


def test_extract_json_says_what_it_peeled_off() -> None:
    found = replies.extract_json('<think>{"no": 1}</think>Here you go: {"proposals": []} Bye.')
    assert found.value == {"proposals": []}
    assert found.notes == ["reasoning block stripped", "preamble skipped", "postscript skipped"]
    cut = replies.extract_json('{"proposals": [{"a": 1}, {"b": "cut sh')
    assert cut.repaired and cut.value == {"proposals": [{"a": 1}]}
    with pytest.raises(ValueError):
        replies.extract_json("<think>only thinking")
