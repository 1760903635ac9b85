"""The layout rule of docs/architecture.md#layout-rule holds: sub-areas are packages, every template lives
in the top-level templates/<area>/, no grab-bag modules, and domain modules do not import Celery task
modules at import time (tasks depend on the domain, not the reverse)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.docs import docset

APPS = ("lessonboard", "lessonq", "lessons", "refine")
# Entry points may import tasks: they sit above the domain (views, API, commands) or are Celery's own.
ENTRY_POINTS = re.compile(r"(^|/)(views|api_views|api|admin|urls|tasks|celery)\.py$|/management/commands/")


def app_modules() -> list[Path]:
    return [p for app in APPS for p in (docset.ROOT / app).rglob("*.py") if "migrations" not in p.parts]


def test_every_template_lives_in_the_top_level_templates_folder() -> None:
    inside_apps = [docset.rel(p) for app in APPS for p in (docset.ROOT / app).rglob("*.html")]
    assert inside_apps == []
    assert "layout-rule" in docset.anchors(docset.DOCS / "architecture.md")


def test_sub_areas_are_packages_not_prefixed_modules() -> None:
    prefixed = [
        docset.rel(p) for p in app_modules() if re.fullmatch(r"[a-z]+_(models|admin|metrics|urls|queries)\.py", p.name)
    ]
    assert prefixed == []


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
