"""The layering of docs/architecture.md#layering holds in the code: the foundation (``lessonboard``) imports
no app, apps import only what their docstring says they may use, the console sits on top, no two modules
import each other (directly or round a longer circle), and no module imports another app's private
(``_name``) symbol. Every import counts, at module level or inside a function: a call-time import hides a
circle from Python, not from a reader. The source is parsed with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs import docset

# One xdist worker runs the whole module (the repository is parsed once per process; lb.py runs xdist with --dist loadgroup).
pytestmark = pytest.mark.xdist_group("layering")

# Layer of each top-level package: a module may import its own package and any package of a lower layer,
# and, in the apps' layer, the apps its package's docstring names (APP_USES).
LAYERS = {"lessonboard": 0, "lessons": 1, "lessonq": 1, "refine": 1, "console": 2}
# Which apps an app may use beside the foundation; the same words are in each app's __init__ docstring.
APP_USES = {"lessons": set(), "lessonq": {"lessons"}, "refine": {"lessons", "lessonq"}}

# Circles left on purpose, each with its reason. An entry that no longer matches a circle fails the test,
# so the list only shrinks.
ALLOWED_CIRCLES: dict[frozenset[str], str] = {}


@dataclass(frozen=True)
class Import:
    source: str  # importing module, dotted
    target: str  # imported module, dotted (the longest prefix that is one of ours)
    names: tuple[str, ...]  # names taken from the target by ``from target import …``
    where: str  # path:line


def modules(root: Path = docset.ROOT) -> dict[str, Path]:
    found = {}
    for package in LAYERS:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path], root: Path = docset.ROOT) -> list[Import]:
    """Every import in the module (``ast.walk``: functions and classes included), resolved to our modules;
    ``from x import y`` points at ``x.y`` when that is a module."""
    found: list[Import] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]

    def ours(dotted: str) -> str | None:
        while dotted and dotted not in known:
            if "." not in dotted:
                return None
            dotted = dotted.rsplit(".", 1)[0]
        return dotted or None

    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if target := ours(alias.name):
                    found.append(Import(name, target, (), where))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                module = f"{base}.{alias.name}"
                if module in known:
                    found.append(Import(name, module, (), where))
                elif target := ours(base):
                    found.append(Import(name, target, (alias.name,), where))
    return [i for i in found if i.target != name]


def all_imports(root: Path = docset.ROOT) -> list[Import]:
    known = modules(root)
    return [i for name, path in sorted(known.items()) for i in imports_of(name, path, known, root)]


@functools.cache
def project_imports() -> tuple[Import, ...]:
    """The repository's imports, parsed once for the module's tests (each parse of every module costs
    seconds on a loaded machine)."""
    return tuple(all_imports())


def top(module: str) -> str:
    return module.split(".")[0]


def layer_violations(imports: list[Import]) -> list[str]:
    bad = []
    for i in imports:
        source, target = top(i.source), top(i.target)
        if source == target or LAYERS[target] < LAYERS[source]:
            continue
        if LAYERS[source] == LAYERS[target] == 1 and target in APP_USES[source]:
            continue
        bad.append(f"{i.where}: {i.source} imports {i.target}")
    return bad


def circles(imports: list[Import]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        graph.setdefault(i.source, set()).add(i.target)
        graph.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def private_imports(imports: list[Import]) -> list[str]:
    return [
        f"{i.where}: {i.source} imports {i.target}.{name}"
        for i in imports
        if top(i.source) != top(i.target)
        for name in i.names
        if name.startswith("_") and not name.startswith("__")
    ]


def test_it_sees_imports_inside_functions_and_relative_ones(tmp_path: Path) -> None:
    for package in LAYERS:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "lessonboard" / "low.py").write_text("def f():\n    from lessons import high\n")
    (tmp_path / "lessons" / "high.py").write_text("from . import other\nfrom lessonboard.low import f\n")
    (tmp_path / "lessons" / "other.py").write_text("from refine.x import _secret\n")
    (tmp_path / "refine" / "x.py").write_text("_secret = 1\n")
    imports = all_imports(tmp_path)
    assert layer_violations(imports) == [
        "lessonboard/low.py:2: lessonboard.low imports lessons.high",
        "lessons/other.py:1: lessons.other imports refine.x",
    ]
    assert circles(imports) == [frozenset({"lessonboard.low", "lessons.high"})]
    assert private_imports(imports) == ["lessons/other.py:1: lessons.other imports refine.x._secret"]


def test_the_foundation_imports_no_app_and_apps_only_what_they_may_use() -> None:
    assert layer_violations(list(project_imports())) == []


def test_no_module_is_part_of_an_import_circle() -> None:
    found = set(circles(list(project_imports())))
    assert sorted(sorted(c) for c in found - set(ALLOWED_CIRCLES)) == []
    assert sorted(sorted(c) for c in set(ALLOWED_CIRCLES) - found) == [], "a circle is gone: drop its entry"


def test_no_module_imports_another_apps_private_name() -> None:
    assert private_imports(list(project_imports())) == []


def test_each_app_says_in_its_docstring_what_it_may_use() -> None:
    for package in LAYERS:
        doc = " ".join(
            (ast.get_docstring(ast.parse((docset.ROOT / package / "__init__.py").read_text())) or "").split()
        )
        assert "may import" in doc, f"{package}/__init__.py: say what the package may import"
        for other in APP_USES.get(package, ()):
            assert f"``{other}``" in doc, f"{package}/__init__.py: name ``{other}``, which it uses"


# What any test module may import from the suite; everything else only from its own folder.
SHARED_TEST_MODULES = ("tests.support", "tests.fakes", "tests.factories", "tests.harness")


def cross_folder_test_imports(root: Path = docset.ROOT) -> list[str]:
    bad = []
    for path in sorted((root / "tests").rglob("*.py")):
        folder = ".".join(path.relative_to(root).parent.parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if not name.startswith("tests.") or name.startswith(SHARED_TEST_MODULES):
                    continue
                if name != folder and not name.startswith(folder + "."):
                    bad.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    return bad


def test_no_test_module_imports_another_test_folders_module() -> None:
    """Shared fixtures and helpers live in tests/support/ (fixtures as plugins named in tests/conftest.py)."""
    assert cross_folder_test_imports() == []


def test_doc_reflection_uses_nothing_of_the_lessons_core() -> None:
    """docs/architecture.md#sub-packages: ``lessons.reflect`` could become an app of its own."""
    core = [
        f"{i.where}: {i.target}"
        for i in project_imports()
        if i.source.startswith("lessons.reflect")
        and top(i.target) == "lessons"
        and not i.target.startswith("lessons.reflect")
    ]
    assert core == []
