"""Reading the repository's documentation as data: files, anchors, links, settings tables, commands and
the runnable examples. Everything is parsed from the files, so new docs and settings are picked up.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SETTINGS = ROOT / "lessonboard" / "settings.py"
CONFIGURATION = DOCS / "configuration.md"
ENV_EXAMPLE = ROOT / ".env.example"
SKIP_DIRS = {".venv", "var", ".git", ".pytest_cache", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}


def doc_files() -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def repo_files(*suffixes: str) -> list[Path]:
    """The repository's files, without descending into SKIP_DIRS (the venv and the test data hold tens of
    thousands of files: walking them and filtering afterwards cost seconds per call)."""
    return [path for path in _all_repo_files() if not suffixes or path.suffix in suffixes]


@cache
def _all_repo_files() -> tuple[Path, ...]:
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if name not in SKIP_DIRS]
        found.extend(Path(folder) / name for name in files if name not in SKIP_DIRS)
    return tuple(sorted(p for p in found if p.is_file()))


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- anchors and links ------------------------------------------------------------------------------
_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EXPLICIT_ANCHOR = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_IMG_SRC = re.compile(r"""<img\s[^>]*src=["']([^"']+)["']""")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def github_slug(heading: str) -> str:
    """The id GitHub gives a heading: lower-cased, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading)  # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.strip().lower()
    kept = []
    for ch in text:
        if ch in " -_" or unicodedata.category(ch)[0] in "LN":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every fragment a link may point at in ``path``: explicit ``<a id>`` and heading slugs (with GitHub's
    ``-1``, ``-2`` suffixes for repeats)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(_EXPLICIT_ANCHOR.findall(line))
        match = _HEADING.match(line)
        if match:
            slug = github_slug(match.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return frozenset(found)


@dataclass(frozen=True)
class Link:
    source: Path
    line: int
    target: str

    def __str__(self) -> str:
        return f"{rel(self.source)}:{self.line}: {self.target}"


def links(path: Path) -> list[Link]:
    """Markdown links and image sources outside code (inline code spans removed first)."""
    found = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        line = re.sub(r"`[^`]*`", "", line)
        for target in [*_LINK.findall(line), *_IMG_SRC.findall(line)]:
            found.append(Link(path, number, target))
    return found


def is_external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target)) or target.startswith("//")


def broken(link: Link) -> str:
    """Why ``link`` does not resolve, or ``""``."""
    if is_external(link.target):
        return ""
    path_part, _, fragment = link.target.partition("#")
    target = (link.source.parent / path_part).resolve() if path_part else link.source
    if not target.exists():
        return "no such file"
    if ROOT not in target.parents and target != ROOT:
        return "points outside the repository"
    if fragment:
        if target.suffix != ".md":
            return "an anchor into a file that is not Markdown"
        if fragment not in anchors(target):
            return f"no anchor #{fragment} in {rel(target)}"
    return ""


_CITATION = re.compile(r"(?<![\w/.])(docs/[a-z0-9_/-]+\.md)(?:#([a-z0-9-]+))?")


@dataclass(frozen=True)
class Citation:
    source: Path
    line: int
    doc: str
    fragment: str

    def __str__(self) -> str:
        return f"{rel(self.source)}:{self.line}: {self.doc}{'#' + self.fragment if self.fragment else ''}"


def _explanations(path: Path) -> list[tuple[int, str]]:
    """The prose of a file: comments and docstrings for Python (string literals in code are data, such as a
    test's fixture paths), every line for templates and config."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".py":
        return list(enumerate(text.splitlines(), 1))
    out: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            out.append((token.start[0], token.string))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    start = body[0].lineno
                    out.extend((start + i, line) for i, line in enumerate(body[0].value.value.splitlines()))
    return out


def code_citations() -> list[Citation]:
    """``docs/….md#anchor`` references in code comments and docstrings, templates and config files."""
    found = []
    for path in repo_files(".py", ".html", ".toml", ".txt", ".cfg", ".example"):
        for number, line in _explanations(path):
            for doc, fragment in _CITATION.findall(line):
                found.append(Citation(path, number, doc, fragment))
    return found


# --- settings -------------------------------------------------------------------------------------------
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")


@cache
def settings_read() -> frozenset[str]:
    """Variable names ``lessonboard/settings.py`` reads: ``cfg("NAME", …)`` / ``cfg.is_set("NAME")`` (the
    declared variables of lessonboard/config.py), ``os.environ.get``, ``os.environ["NAME"]`` and ``os.getenv``."""
    tree = ast.parse(SETTINGS.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = ast.unparse(node.func)
            if func in ("cfg", "cfg.is_set", "os.environ.get", "os.getenv"):
                value = node.args[0].value
                if isinstance(value, str) and _ENV_NAME.match(value):
                    names.add(value)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            if isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant):
                names.add(str(node.slice.value))
    return frozenset(names)


def table_variables(path: Path) -> dict[str, int]:
    """Variables a doc documents: backticked upper-case names in the first cell of a table row."""
    found: dict[str, int] = {}
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        if not line.lstrip().startswith("|"):
            continue
        first = line.strip().strip("|").split("|")[0]
        for name in re.findall(r"`([^`]+)`", first):
            if _ENV_NAME.match(name):
                found.setdefault(name, number)
    return found


def env_example_names() -> set[str]:
    """Names ``.env.example`` shows, set or commented out (``NAME=…`` / ``# NAME=…``)."""
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]{2,})=", ENV_EXAMPLE.read_text(encoding="utf-8"), re.M))


# --- management commands --------------------------------------------------------------------------------
_COMMAND = re.compile(r"(?:python3 lb\.py manage|manage\.py)\s+([a-z][a-z0-9_]*)([^`\n]*)")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


@dataclass(frozen=True)
class CommandMention:
    source: Path
    line: int
    command: str
    words: tuple[str, ...]
    flags: tuple[str, ...]

    def __str__(self) -> str:
        return f"{rel(self.source)}:{self.line}: manage.py {self.command} {' '.join(self.words)}".rstrip()


def command_mentions() -> list[CommandMention]:
    """Every ``python3 lb.py manage <command> …`` / ``manage.py <command> …`` in README.md and docs/,
    in code blocks and prose alike, with the words and ``--flags`` that follow on the same line."""
    found = []
    for path in doc_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for command, rest in _COMMAND.findall(line):
                rest = rest.split(" #", 1)[0]  # a shell comment explains, it is not an argument
                words = tuple(w for w in rest.split() if re.match(r"^[a-z][a-z0-9_-]*$", w))
                found.append(CommandMention(path, number, command, words, tuple(_FLAG.findall(rest))))
    return found


# --- runnable examples ----------------------------------------------------------------------------------
EXAMPLE_MARK = re.compile(r"^#\s*doc-example:\s*([a-z0-9-]+)\s*$")


@dataclass(frozen=True)
class Example:
    source: Path
    line: int
    name: str
    language: str  # sh | python
    code: str

    @property
    def id(self) -> str:
        return f"{self.source.stem}:{self.name}"


def examples() -> list[Example]:
    """Fenced ```sh / ```python blocks whose first line is ``# doc-example: <name>``, in document order."""
    found = []
    for path in doc_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            opening = re.match(r"^```(sh|bash|python)\s*$", lines[i].strip())
            if not opening:
                i += 1
                continue
            start = i
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            i += 1
            mark = EXAMPLE_MARK.match(body[0].strip()) if body else None
            if mark:
                language = "python" if opening.group(1) == "python" else "sh"
                found.append(Example(path, start + 1, mark.group(1), language, "\n".join(body) + "\n"))
    return found
