"""Hostile repositories: whoever can write to an attached repository must not read or write outside it,
nor make git run a program on the server (docs/security.md#hostile-repositories).

Each test builds a real repository carrying one attack and shows the attack is live (plain git or a
plain read falls for it) where that can be shown without harm, then that lessonboard refuses it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lessonboard.models import Workspace
from lessons.reflect.commit import commit_reflection
from lessons.reflect.engine import MANIFEST_PATH
from lessons.reflect.git import GitRunner
from lessons.reflect.models import ReflectEvent, ReflectManifest
from lessons.reflect.prepare import prepare_reflection
from lessons.reflect.repository import RepositoryError, attach_repository
from tests.factories import WorkspaceFactory
from tests.support.gitrepo import GIT_ENV, GitRepo

pytestmark = pytest.mark.django_db

BOOT = ".aioson/context/bootstrap"
PREPARE = "/api/v1/workspaces/proj/reflect/prepare"
SECRET = "SECRET-KEY-0123456789-do-not-leak"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file the server can read that lies outside every allowed root."""
    path = tmp_path / "outside" / "secret_key"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


@pytest.fixture
def workspace(repo: GitRepo) -> Workspace:
    repo.write("src/routes/users.js", "export {}\n")
    repo.git("add", "-A")
    return attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(repo.path))


def plain_git(repo: GitRepo, *args: str) -> None:
    """git as an unprotected caller would run it (the repository's config in force)."""
    subprocess.run(["git", *args], cwd=repo.path, env={**os.environ, **GIT_ENV}, capture_output=True, check=False)


# --- symlinks that read outside ------------------------------------------------------------------------
def test_a_bootstrap_symlink_to_a_file_outside_is_never_read(
    api: Any, client_as: Any, carol: Any, repo: GitRepo, workspace: Workspace, secret: Path
) -> None:
    link = repo.path / BOOT / "what-is.md"
    link.unlink()
    link.symlink_to(secret)
    assert SECRET in link.read_text()  # the vector: a plain read follows the link
    repo.commit("link the secret")

    response = api.post(PREPARE, {"agent": "dev", "force": True})
    assert response.status_code == 409
    assert "outside the repository" in response.json()["error"]
    assert SECRET not in response.content.decode()
    assert not repo.exists(MANIFEST_PATH) and not ReflectManifest.objects.exists()
    assert ReflectEvent.objects.filter(event_type="memory_reflect_failed").exists()

    page = client_as(carol).get("/workspaces/proj/")
    assert page.status_code == 200
    assert SECRET not in page.content.decode()
    assert "outside the repository" in page.content.decode()


def test_a_bootstrap_folder_that_is_a_symlink_outside_is_refused(
    api: Any, tmp_path: Path, repo: GitRepo, workspace: Workspace, secret: Path
) -> None:
    elsewhere = tmp_path / "elsewhere-bootstrap"
    elsewhere.mkdir()
    (elsewhere / "what-is.md").write_text(SECRET)
    context = repo.path / ".aioson" / "context"
    (context / "bootstrap").rename(tmp_path / "moved")
    (context / "bootstrap").symlink_to(elsewhere)

    response = api.post(PREPARE, {"agent": "dev", "force": True})
    assert response.status_code == 409
    assert SECRET not in response.content.decode()
    assert list(elsewhere.iterdir()) == [elsewhere / "what-is.md"]  # nothing written there either


def test_a_symlink_that_stays_inside_the_repository_is_followed(repo: GitRepo, workspace: Workspace) -> None:
    repo.write("docs/what-is.md", "---\n---\nShared text.\n")
    link = repo.path / BOOT / "what-is.md"
    link.unlink()
    link.symlink_to(repo.path / "docs" / "what-is.md")
    result = prepare_reflection(workspace=workspace, agent="dev", force=True)
    assert result["manifest"]["current_bootstrap_snapshot"]["what-is.md"] == "---\n---\nShared text.\n"


def test_a_hard_link_and_a_fifo_are_not_read(repo: GitRepo, workspace: Workspace, secret: Path) -> None:
    hard = repo.path / BOOT / "what-is.md"
    hard.unlink()
    try:
        os.link(secret, hard)
    except OSError:  # pragma: no cover - tmp_path on another file system than the repository
        pytest.skip("hard links need one file system")
    with pytest.raises(RepositoryError, match="hard link"):
        prepare_reflection(workspace=workspace, agent="dev", force=True)
    hard.unlink()
    os.mkfifo(hard)  # would block a plain open() forever
    with pytest.raises(RepositoryError, match="not a regular file"):
        prepare_reflection(workspace=workspace, agent="dev", force=True)


def test_a_bootstrap_file_larger_than_a_commit_may_be_is_not_read(
    settings: Any, repo: GitRepo, workspace: Workspace
) -> None:
    settings.REFLECT_MAX_COMMIT_BYTES = 4096
    repo.write(f"{BOOT}/what-is.md", "x" * 4097)
    with pytest.raises(RepositoryError, match="larger than 4096 bytes"):
        prepare_reflection(workspace=workspace, agent="dev", force=True)
    repo.write(f"{BOOT}/what-is.md", "x" * 4096)
    assert prepare_reflection(workspace=workspace, agent="dev", force=True)["ok"] is True


# --- the manifest write -----------------------------------------------------------------------------
def test_a_committed_aioson_symlink_cannot_redirect_the_manifest_write(api: Any, tmp_path: Path, roots: Path) -> None:
    # The bootstrap lives elsewhere in the repository; `.aioson` is committed as a link to a folder outside.
    target = tmp_path / "victim"
    target.mkdir()
    hostile = GitRepo(roots / "hostile")
    hostile.seed_bootstrap("docs/bootstrap")
    (hostile.path / ".aioson").symlink_to(target)
    hostile.write("src/routes/users.js", "export {}\n")
    hostile.commit("hostile")
    assert hostile.git("ls-files", "-s", ".aioson").startswith("120000")  # committed as a symlink
    attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(hostile.path), bootstrap_dir="docs/bootstrap")

    response = api.post(PREPARE, {"agent": "dev", "force": True})
    assert response.status_code == 409
    assert "outside the repository" in response.json()["error"]
    assert list(target.iterdir()) == []
    assert not ReflectManifest.objects.exists()


def test_a_runtime_symlink_neither_receives_the_manifest_nor_loses_a_file(
    tmp_path: Path, repo: GitRepo, workspace: Workspace
) -> None:
    victim = tmp_path / "victim-runtime"
    victim.mkdir()
    (victim / "reflect-prompt.json").write_text('{"keep": true}')
    (repo.path / ".aioson" / "runtime").symlink_to(victim)

    with pytest.raises(RepositoryError, match="outside the repository"):
        prepare_reflection(workspace=workspace, agent="dev", force=True)
    # commit neither reads the outside "manifest" nor deletes it
    result = commit_reflection(workspace=workspace, files={f"{BOOT}/how-it-works.md": "x"})
    assert result["error"] == "missing_manifest"
    assert json.loads((victim / "reflect-prompt.json").read_text()) == {"keep": True}


def test_a_manifest_that_is_a_symlink_outside_is_not_written_through(
    tmp_path: Path, repo: GitRepo, workspace: Workspace
) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text("keep")
    manifest = repo.path / MANIFEST_PATH
    manifest.parent.mkdir(parents=True)
    manifest.symlink_to(victim)
    with pytest.raises(RepositoryError, match="outside the repository"):
        prepare_reflection(workspace=workspace, agent="dev", force=True)
    assert victim.read_text() == "keep"


# --- git config that runs programs -----------------------------------------------------------------
def _filtered(repo: GitRepo, marker: Path) -> None:
    """A `clean` filter on every file, defined in .git/config, and a file whose stat is dirty."""
    repo.git("config", "filter.evil.clean", f"touch {marker}; cat")
    repo.write(".gitattributes", "* filter=evil\n")
    (repo.path / "README.md").write_text("changed\n")


def test_a_clean_filter_in_git_config_never_runs(api: Any, tmp_path: Path, repo: GitRepo, workspace: Workspace) -> None:
    marker = tmp_path / "filter-ran"
    _filtered(repo, marker)  # written after attach: caught at use, not only at attach

    response = api.post(PREPARE, {"agent": "dev", "git_range": "HEAD..HEAD"})
    assert response.status_code == 409
    body = response.json()
    assert "filter.evil.clean" in body["error"] and "git config --unset" in body["error"]
    assert not marker.exists()
    with pytest.raises(RepositoryError, match=r"filter\.evil\.clean"):
        attach_repository(workspace, repo_path=str(repo.path))
    assert not marker.exists()

    plain_git(repo, "diff", "--name-only", "HEAD")  # the vector is live for an unprotected caller
    assert marker.exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("filter.x.process", "touch {marker}"),
        ("filter.x.smudge", "touch {marker}"),
        ("diff.x.textconv", "touch {marker}; cat"),
        ("diff.x.command", "touch {marker}"),
        ("diff.external", "touch {marker}"),
        ("core.fsmonitor", "touch {marker}"),
        ("core.hooksPath", "/tmp"),
        ("core.sshCommand", "touch {marker}"),
        ("core.pager", "touch {marker}"),
        ("core.worktree", "/"),
        ("include.path", "/etc/gitconfig"),
        ("includeIf.gitdir:/.path", "/etc/gitconfig"),
        ("credential.helper", "!touch {marker}"),
        ("gpg.program", "touch {marker}"),
        ("diff.orderFile", "/etc/passwd"),
        ("remote.origin.uploadpack", "touch {marker}"),
    ],
)
def test_repository_config_that_names_a_program_is_refused_at_attach(
    tmp_path: Path, repo: GitRepo, key: str, value: str
) -> None:
    marker = tmp_path / "ran"
    repo.git("config", key, value.format(marker=marker))
    with pytest.raises(RepositoryError, match=f"(?i)sets {re.escape(key)}"):
        attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(repo.path))
    assert not marker.exists()


def test_harmless_config_is_accepted(repo: GitRepo) -> None:
    repo.git("config", "core.fsmonitor", "false")
    repo.git("config", "remote.origin.url", "https://example.test/x.git")
    repo.git("config", "pull.rebase", "true")
    assert attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(repo.path)).repo_path


@pytest.mark.parametrize(
    ("key", "value", "live"),
    [
        ("core.fsmonitor", "touch {marker}", True),
        ("diff.external", "touch {marker}", True),
        ("core.pager", "touch {marker}", False),  # a pager only runs on a terminal
    ],
)
def test_the_runner_pins_what_it_can_even_without_the_config_check(
    tmp_path: Path, repo: GitRepo, key: str, value: str, live: bool
) -> None:
    # Defence in depth for a config written between the check and the command.
    marker = tmp_path / "ran"
    repo.git("config", key, value.format(marker=marker))
    (repo.path / "README.md").write_text("changed\n")
    runner = GitRunner.for_repo(repo.path)
    # Without --no-ext-diff the pinned empty diff.external fails closed (git cannot run ""), hence quiet.
    runner.quiet("diff", "HEAD")
    runner.quiet("diff", "--stat", "HEAD")
    assert "README.md" in runner.run("diff", "--no-ext-diff", "--name-only", "HEAD")
    assert not marker.exists()
    if live:
        plain_git(repo, "diff", "HEAD")
        assert marker.exists()


def test_the_server_git_environment_does_not_reach_the_repository(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, repo: GitRepo
) -> None:
    marker = tmp_path / "ran"
    other = GitRepo(tmp_path / "other")
    monkeypatch.setenv("GIT_DIR", str(other.path / ".git"))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", f"touch {marker}")
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", f"touch {marker}")
    (repo.path / "README.md").write_text("changed\n")
    runner = GitRunner.for_repo(repo.path)
    assert runner.changed_files("HEAD..HEAD") == ["README.md"]
    runner.quiet("diff", "HEAD")
    assert not marker.exists()


# --- the work tree and git directory must lie under the roots ---------------------------------------
def test_a_git_file_pointing_outside_the_roots_is_refused(tmp_path: Path, roots: Path) -> None:
    outside = GitRepo(tmp_path / "outside-repo")
    outside.commit("outside")
    inside = roots / "inside"
    inside.mkdir()
    (inside / ".git").write_text(f"gitdir: {outside.path / '.git'}\n")
    with pytest.raises(RepositoryError, match=r"git directory .* outside the allowed roots"):
        attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(inside))


def test_a_folder_inside_a_work_tree_that_starts_above_the_roots_is_refused(tmp_path: Path, settings: Any) -> None:
    outer = GitRepo(tmp_path / "outer")
    outer.commit("outer")
    root = outer.path / "repos"
    root.mkdir()
    settings.WORKSPACE_ROOTS = [root]
    with pytest.raises(RepositoryError, match=r"work tree .* starts outside the allowed roots"):
        attach_repository(WorkspaceFactory(slug="proj"), repo_path=str(root))
