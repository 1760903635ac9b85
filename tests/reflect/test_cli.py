"""``manage.py reflect_docs``: AIOSON's flags, JSON results and exit codes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from lessonboard.models import Workspace
from lessons.reflect.engine import MANIFEST_PATH
from lessons.reflect.repository import attach_repository
from tests.factories import WorkspaceFactory
from tests.support.gitrepo import GitRepo
from tests.support.processes import ROOT, subprocess_env

BOOT = ".aioson/context/bootstrap"
HOW = f"{BOOT}/how-it-works.md"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(*args: str, stdin: Any = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        call_command("reflect_docs", *args, stdout=out, stderr=err, stdin=stdin or Tty())
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def workspace(db: Any, repo: GitRepo) -> Workspace:
    repo.write("src/controllers/users.rb", "class Users; end\n")
    repo.git("add", "-A")
    return attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(repo.path))


def new_how(repo: GitRepo) -> str:
    return repo.read(HOW).replace("2024-01-01T00:00:00Z", "2026-11-30T05:00:00Z") + "Users controller.\n"


@pytest.mark.django_db
def test_prepare_prints_the_json_result_and_exits_0(repo: GitRepo, workspace: Workspace) -> None:
    code, out, _ = run("prepare", "proj", "--agent=dev", "--range=HEAD~3..HEAD", "--session-id=s1", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["manifest"]["session_id"] == "s1"
    assert result["manifest"]["heuristic_reasons"] == ["routes/controllers touched (1 files)"]
    assert repo.exists(MANIFEST_PATH)


@pytest.mark.django_db
def test_commit_reads_output_relative_to_the_working_directory(
    repo: GitRepo, workspace: Workspace, tmp_path: Path, monkeypatch: Any
) -> None:
    run("prepare", "proj", "--agent=dev")
    (tmp_path / "out.json").write_text(json.dumps({"files": {HOW: new_how(repo)}}))
    monkeypatch.chdir(tmp_path)
    code, out, _ = run("commit", "proj", "--output=out.json", "--dry-run")
    assert (code, out.strip()) == (0, f"dry-run validated 1 file(s)\n  would write {HOW}")
    code, out, _ = run("commit", "proj", "--output=out.json", "--json")
    assert code == 0 and json.loads(out)["written"] == [HOW]
    assert "Users controller." in repo.read(HOW)


@pytest.mark.django_db
def test_commit_reads_stdin_and_exits_1_on_failure(repo: GitRepo, workspace: Workspace) -> None:
    run("prepare", "proj")
    code, _, err = run("commit", "proj", stdin=io.StringIO(json.dumps({"files": {"README.md": "x"}})))
    assert code == 1
    assert "validation failed:" in err and "file outside allowed_paths: README.md" in err
    assert repo.read("README.md") == "hello\n"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        ((), None, "reflect_docs commit requires --output=<path> or JSON on stdin"),
        ((), io.StringIO("   \n"), "reflect_docs commit requires --output=<path> or JSON on stdin"),
        ((), io.StringIO("{bad"), "Expecting property name"),
        (("--output=/nonexistent/out.json",), None, "No such file"),
        ((), io.StringIO('{"files": {"a": 1}}'), "file content must be a string: a"),
    ],
)
def test_commit_answers_bad_input(workspace: Workspace, args: tuple[str, ...], stdin: Any, message: str) -> None:
    code, out, _ = run("commit", "proj", "--json", *args, stdin=stdin)
    result = json.loads(out)
    assert code == 1
    assert result["ok"] is False and result["error"] == "bad_input"
    assert message in result["message"]


@pytest.mark.django_db
def test_it_names_an_unknown_workspace_or_a_missing_repository(db: Any) -> None:
    with pytest.raises(CommandError, match="unknown workspace 'ghost'"):
        run("prepare", "ghost")
    WorkspaceFactory(slug="norepo")
    with pytest.raises(CommandError, match="has no repository attached"):
        run("prepare", "norepo")


@pytest.mark.django_db
def test_attach_validates_and_sets_the_gate(repo: GitRepo, roots: Path) -> None:
    code, out, _ = run("attach", "newws", f"--repo={repo.path}", "--human-gate=on")
    assert code == 0 and "human gate on" in out
    ws = Workspace.objects.get(slug="newws")
    assert (ws.repo_path, ws.reflect_human_gate) == (str(repo.path), True)
    with pytest.raises(CommandError, match="outside the allowed roots"):
        run("attach", "other", "--repo=/")
    assert not Workspace.objects.filter(slug="other").exists()


@pytest.mark.django_db(transaction=True)
def test_the_process_exits_1_for_ok_false_and_0_for_ok_true(repo: GitRepo, workspace: Workspace, roots: Path) -> None:
    env = subprocess_env(LESSONBOARD_WORKSPACE_ROOTS=str(roots))

    def manage(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", "reflect_docs", *args],
            cwd=ROOT,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    missing = manage("commit", "proj", "--json", stdin=json.dumps({"files": {HOW: "x"}}))
    assert missing.returncode == 1, missing.stderr
    assert json.loads(missing.stdout)["error"] == "missing_manifest"
    prepared = manage("prepare", "proj", "--agent=dev")
    assert prepared.returncode == 0, prepared.stderr
    assert "reflect manifest at .aioson/runtime/reflect-prompt.json" in prepared.stdout
    committed = manage("commit", "proj", stdin=json.dumps({"files": {HOW: new_how(repo)}}))
    assert committed.returncode == 0, committed.stderr
    assert committed.stdout.strip() == "wrote 1 bootstrap file(s)"
