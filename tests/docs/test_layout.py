"""The layout rule of docs/architecture.md#layout-rule holds: sub-areas are packages, every template lives
in the top-level templates/<area>/, no grab-bag modules, and domain modules do not import Celery task
modules at import time (tasks depend on the domain, not the reverse)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.docs import docset

APPS = ("lessonboard", "lessonq", "lessons", "refine", "console")
# Entry points may import tasks: they sit above the domain (views, API, commands) or are Celery's own.
ENTRY_POINTS = re.compile(r"(^|/)(views|api_views|api|admin|urls|tasks|celery)\.py$|/management/commands/")


def app_modules() -> list[Path]:
    return [p for app in APPS for p in (docset.ROOT / app).rglob("*.py") if "migrations" not in p.parts]


def test_every_template_lives_in_the_top_level_templates_folder() -> None:
    inside_apps = [docset.rel(p) for app in APPS for p in (docset.ROOT / app).rglob("*.html")]
    assert inside_apps == []
    assert "layout-rule" in docset.anchors(docset.DOCS / "architecture.md")


# A module named for what a sub-area's package would hold (``mcp_tools.py``, ``review_models.py``): the
# sub-area wants a package (``mcp/tools.py``).
SUB_AREA_MODULE = re.compile(
    r"[a-z0-9]+_(models|admin|metrics|urls|queries|views|tools|stdio|tasks|forms|schemas|api)\.py"
)
# ``api_views.py`` is the established name of an app's (or sub-area package's) JSON API views, beside its
# HTML ``views.py``: the same area's second front door, not a sub-area of its own.
ESTABLISHED = {"api_views.py"}


def prefixed_modules(paths: list[str]) -> list[str]:
    """The modules (repository paths) that make a sub-area out of prefixed modules: one named like a
    sub-area's module, or two or more in one folder sharing the prefix before their first ``_``.
    Management commands are named after the command they add, so they are left out."""
    flagged = set()
    by_prefix: dict[tuple[str, str], list[str]] = {}
    for path in paths:
        folder, _, name = path.rpartition("/")
        if "/management/commands" in f"/{folder}" or name in ESTABLISHED or "_" not in name.strip("_"):
            continue
        if SUB_AREA_MODULE.fullmatch(name):
            flagged.add(path)
        by_prefix.setdefault((folder, name.split("_")[0]), []).append(path)
    flagged.update(path for group in by_prefix.values() if len(group) > 1 for path in group)
    return sorted(flagged)


def test_the_prefixed_module_rule_catches_what_it_should() -> None:
    caught = ["a/mcp_tools.py", "a/mcp_views.py", "a/mcp_stdio.py", "a/review_models.py", "b/x_one.py", "b/x_two.py"]
    allowed = ["a/api_views.py", "a/e5_onnx.py", "c/management/commands/create_user.py"]
    allowed += ["c/management/commands/create_agent_token.py", "a/__init__.py", "a/views.py", "b/x.py"]
    assert prefixed_modules(caught + allowed) == sorted(caught)


def test_sub_areas_are_packages_not_prefixed_modules() -> None:
    assert prefixed_modules([docset.rel(p) for p in app_modules()]) == []


def test_there_are_no_grab_bag_modules() -> None:
    assert [docset.rel(p) for p in app_modules() if p.stem in ("utils", "helpers", "services", "misc")] == []


def test_domain_modules_do_not_import_task_modules_at_import_time() -> None:
    offenders = []
    for path in app_modules():
        if ENTRY_POINTS.search(docset.rel(path)):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module level only: a call-time import does not tie the modules at import
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n.endswith(".tasks") for n in names):
                offenders.append(f"{docset.rel(path)}:{node.lineno}")
    assert offenders == []


def tracked_entries() -> list[tuple[str, str]]:
    """(mode, path) of every file git tracks, from the index."""
    import subprocess

    listing = subprocess.run(
        ["git", "ls-files", "-s", "-z"], cwd=docset.ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [(line.split(" ", 1)[0], line.split("\t", 1)[1]) for line in listing.split("\0") if line]


def test_the_repository_tracks_no_symlink_and_nothing_machine_local() -> None:
    # A committed `.venv` symlink into one machine's folder once broke both README commands on every
    # other machine ("File exists: .venv"): a clean checkout must hold only the project's own files.
    entries = tracked_entries()
    assert entries, "git ls-files listed nothing"
    symlinks = [path for mode, path in entries if mode == "120000"]
    local = [path for _, path in entries if path.split("/")[0] in {".venv", "var", ".env"}]
    assert symlinks == []
    assert local == []


def test_every_name_on_the_slow_list_is_a_test_function_that_exists() -> None:
    # tests/slow.txt (docs/testing.md#tiers) names functions as path::function; a renamed or deleted test
    # would leave a line that marks nothing.
    import ast

    lines = (docset.ROOT / "tests" / "slow.txt").read_text().splitlines()
    names = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert len(names) > 10
    missing = []
    for name in names:
        path, _, function = name.partition("::")
        source = docset.ROOT / path
        defined = source.exists() and any(
            isinstance(node, ast.FunctionDef) and node.name == function
            for node in ast.walk(ast.parse(source.read_text(encoding="utf-8")))
        )
        if not defined:
            missing.append(name)
    assert missing == []
