"""Prompts as versioned files (lessonboard/llm/promptfiles.py): every prompt the server sends is a file
named ``<name>-v<N>``, its text never changes under the same version (a committed sha256 list says what
each version's text is), and each purpose's calls record the version of the file they sent."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from lessonboard.llm import promptfiles

MANIFEST = Path(__file__).resolve().parent.parent / "data" / "prompts.sha256"
HOW = (
    "a prompt's text changed under the same version: add <name>-v<N+1> beside it, point the code at it, keep "
    "the old file, and add the new file's line to tests/data/prompts.sha256 (sha256sum <file>)"
)


def _manifest() -> dict[str, str]:
    rows = {}
    for line in MANIFEST.read_text().splitlines():
        digest, _, path = line.partition("  ")
        rows[path] = digest
    return rows


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_prompt_file_is_named_with_a_version() -> None:
    found = promptfiles.files()
    assert len(found) >= 6
    bad = [p.name for p in found if promptfiles.FILE_NAME.match(p.name) is None]
    assert not bad, f"prompt files must be named <name>-v<N>.txt or .md: {bad}"


def test_no_prompt_text_changes_without_a_new_version() -> None:
    listed = _manifest()
    found = {p.relative_to(promptfiles.ROOT).as_posix(): p for p in promptfiles.files()}
    changed = [path for path, file in found.items() if path in listed and listed[path] != _digest(file)]
    assert not changed, f"{changed}: {HOW}"
    unlisted = sorted(set(found) - set(listed))
    assert not unlisted, f"new prompt files {unlisted}: add their lines to tests/data/prompts.sha256"
    removed = sorted(set(listed) - set(found))
    assert not removed, f"{removed} removed: a recorded call names that version; keep the file"


def test_the_manifest_check_catches_an_edit(tmp_path: Path) -> None:
    """The check above can fail: an edited copy of a listed file no longer matches its line."""
    path = promptfiles.files()[0]
    relative = path.relative_to(promptfiles.ROOT).as_posix()
    copy = tmp_path / path.name
    copy.write_bytes(path.read_bytes() + b" ")
    assert _manifest()[relative] == _digest(path) != _digest(copy)


def test_load_reads_the_text_name_and_version(tmp_path: Path) -> None:
    (tmp_path / "lesson-v2.txt").write_text("Say {what}.\n", encoding="utf-8")
    prompt = promptfiles.load(tmp_path, "lesson-v2")
    assert (prompt.name, prompt.version, prompt.text) == ("lesson", "lesson-v2", "Say {what}.")
    assert prompt.format(what="hi") == "Say hi."
    with pytest.raises(FileNotFoundError, match="lesson-v3"):
        promptfiles.load(tmp_path, "lesson-v3")


def test_the_code_sends_the_files_it_names() -> None:
    from lessonboard.llm import gateway
    from lessonq import generation
    from lessons import doc2query, retrieval
    from lessons.review import proposer, scoring
    from refine import refiner

    sent = {
        generation.LESSON_PROMPT: generation.LESSON_SYSTEM_PROMPT,
        retrieval.HYDE_PROMPT: retrieval.HYDE_SYSTEM,
        doc2query.DOC2QUERY_PROMPT: doc2query.SYSTEM,
        refiner.REFINER_PROMPT: refiner.SYSTEM_PROMPT,
        scoring.SCORE_PROMPT: scoring.PROMPT,
        gateway.PING_PROMPT: gateway.PING_PROMPT.text,
    }
    for prompt, text in sent.items():
        assert prompt.path.read_text(encoding="utf-8").removesuffix("\n") == text
        assert prompt.path.stem == prompt.version
    assert (proposer.PROMPT_DIR / f"{proposer.PROMPT_VERSION}.md").is_file()


@pytest.mark.django_db(transaction=True)
def test_a_lesson_call_records_its_prompt_file(fake_openai: Any) -> None:
    from lessonboard.llm import usage
    from lessonboard.models import LLMCall
    from lessonq import generation

    fake_openai.script("<situation>s</situation><mistake>m</mistake><correction>c</correction><tags>a, b</tags>")
    prompt = generation.LESSON_PROMPT
    with usage.context(purpose="lesson", prompt=prompt.name, version=prompt.version):
        generation.generate(task="t", attempt="a", outcome="ERROR: x", trigger="error")
    call = LLMCall.objects.get()
    assert (call.prompt_name, call.prompt_version) == ("lesson", "lesson-v1")
    assert fake_openai.chat_requests()[0].json["messages"][0]["content"] == prompt.text
