"""Prompts as versioned files (docs/operations.md#llm-prompts).

Every prompt sent to a model lives in a ``prompts/`` folder beside the code that sends it, one file per
version, named ``<name>-v<N>.txt`` (or ``.md``): ``lessonq/prompts/lesson-v1.txt``. The file's text,
without its final newline, is the prompt; the file name without its suffix is the version recorded on
every call (``LLMCall.prompt_version``, beside ``prompt_name``), so a recorded call names one text for
good. Changing a prompt means adding the next version's file and pointing the code at it; the old file
stays, for the calls that used it. ``tests/data/prompts.sha256`` holds every file's sha256, and a test
fails when a file's text changes under the same version, or when a file is added or removed without the
list following.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
FILE_NAME = re.compile(r"^(?P<name>[a-z][a-z0-9_]*)-v(?P<number>[1-9][0-9]*)\.(?:txt|md)$")
SUFFIXES = (".txt", ".md")
# Not prompts this server sends: reflect's instructions are handed to the agent by the API (its own model
# reads them, no LLMCall is recorded), and are served as files by name.
NOT_SENT = ("lessons/reflect/prompts",)


@dataclass(frozen=True)
class Prompt:
    name: str
    version: str
    text: str
    path: Path

    def format(self, **values: object) -> str:
        """The text with ``str.format`` fields filled in (a template prompt such as the proposer's)."""
        return self.text.format(**values)


def load(folder: Path, version: str) -> Prompt:
    """The prompt ``version`` (``"lesson-v1"``) from ``folder``; ``FileNotFoundError`` when it is missing."""
    for suffix in SUFFIXES:
        path = folder / f"{version}{suffix}"
        if path.is_file():
            break
    else:
        raise FileNotFoundError(f"no prompt file {version}.txt or {version}.md in {folder}")
    match = FILE_NAME.match(path.name)
    if match is None:
        raise ValueError(f"prompt file {path.name} is not named <name>-v<N>.txt")
    text = path.read_text(encoding="utf-8").removesuffix("\n")
    return Prompt(name=match["name"], version=version, text=text, path=path)


def files(root: Path = ROOT) -> list[Path]:
    """Every prompt file of the project (``prompts/`` folders of the foundation and the apps)."""
    found = []
    for folder in sorted(root.glob("*/prompts")) + sorted(root.glob("*/*/prompts")):
        relative = folder.relative_to(root).as_posix()
        if relative in NOT_SENT or relative.split("/")[0] in {".venv", "tests", "var", "node_modules", "static"}:
            continue
        found += [p for p in sorted(folder.iterdir()) if p.is_file() and p.suffix in SUFFIXES]
    return found
