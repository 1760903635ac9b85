"""The git runner and evaluation on real repositories: range fallback, volume boundary, bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from lessons.reflect.engine import Shortstat, evaluate
from lessons.reflect.git import GitError, GitRunner
from tests.support.gitrepo import GitRepo


def runner(repo: GitRepo, **kw: float) -> GitRunner:
    return GitRunner(cwd=repo.path, timeout=kw.get("timeout", 10.0), max_output=int(kw.get("max_output", 1 << 22)))


def evaluate_repo(repo: GitRepo, git_range: str = "HEAD~3..HEAD") -> dict[str, object]:
    r = runner(repo)
    return evaluate(
        changed_files=r.changed_files(git_range), shortstat=r.shortstat(git_range), bootstrap_present=True
    ).as_dict()


def test_it_falls_back_to_git_diff_head_with_fewer_than_four_commits(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "r")
    repo.write("src/routes/users.js", "export {}\n")
    repo.commit("one")
    repo.write("src/routes/users.js", "export { a }\n")  # uncommitted edit of a tracked file
    result = evaluate_repo(repo)
    assert result["verdict"] == "relevant"
    assert result["changedFiles"] == ["src/routes/users.js"]
    assert result["shortstat"] == {"files": 1, "insertions": 1, "deletions": 1}
    assert result["gitRange"] == "HEAD~3..HEAD"  # the requested range, not HEAD


def test_it_uses_the_range_when_it_is_valid_and_ignores_uncommitted_changes(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "r")
    for i in range(4):
        repo.write(f"docs/{i}.md", f"{i}\n")
        repo.commit(f"c{i}")
    repo.write("src/routes/x.js", "y\n")
    repo.git("add", "src/routes/x.js")  # staged, not committed: outside HEAD~3..HEAD
    result = evaluate_repo(repo)
    assert result["changedFiles"] == ["docs/1.md", "docs/2.md", "docs/3.md"]
    assert result["verdict"] == "skip"


def test_it_falls_back_for_an_invalid_range_and_skips_when_still_empty(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "r")
    repo.write("src/routes/x.js", "y\n")
    repo.commit("only")
    result = evaluate_repo(repo, "no-such-ref..HEAD")
    assert (result["verdict"], result["changedFiles"]) == ("skip", [])


def test_it_treats_a_directory_without_git_as_no_changes(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    r = GitRunner(cwd=plain, timeout=5.0, max_output=1024)
    assert r.changed_files("HEAD~3..HEAD") == []
    assert r.shortstat("HEAD~3..HEAD") == Shortstat()
    assert r.is_work_tree() is False


def _bulk_commit(tmp_path: Path, files: int, lines: int) -> GitRepo:
    repo = GitRepo(tmp_path / f"bulk-{files}-{lines}")
    repo.write("seed.txt", "seed\n")
    repo.commit("seed")
    per_file = [lines // files + (1 if i < lines % files else 0) for i in range(files)]
    for i, count in enumerate(per_file):
        repo.write(f"docs/f{i}.txt", "".join(f"line {n}\n" for n in range(count)))
    repo.commit("bulk")
    return repo


@pytest.mark.parametrize(
    ("files", "lines", "relevant"), [(10, 200, True), (9, 200, False), (10, 199, False), (11, 250, True)]
)
def test_it_applies_the_volume_boundary_on_a_real_diff(tmp_path: Path, files: int, lines: int, relevant: bool) -> None:
    repo = _bulk_commit(tmp_path, files, lines)
    result = evaluate_repo(repo, "HEAD~1..HEAD")
    assert result["shortstat"] == {"files": files, "insertions": lines, "deletions": 0}
    assert (result["verdict"] == "relevant") is relevant
    if relevant:
        assert result["reasons"] == [f"high volume: {files} files, {lines} lines"]


def test_it_refuses_a_range_that_looks_like_an_option(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "r")
    repo.write("a.txt", "a\n")
    repo.commit("a")
    target = tmp_path / "written-by-git"
    assert runner(repo).changed_files(f"--output={target}") == []
    assert not target.exists()


def test_it_caps_git_output(tmp_path: Path) -> None:
    repo = _bulk_commit(tmp_path, 30, 30)
    with pytest.raises(GitError, match="larger than"):
        runner(repo, max_output=64).run("diff", "--name-only", "HEAD~1..HEAD")
    assert runner(repo, max_output=64).changed_files("HEAD~1..HEAD") == []  # swallowed, as AIOSON does


def test_it_times_out_a_slow_git(tmp_path: Path) -> None:
    fake = tmp_path / "slow-git"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(0o755)
    slow = GitRunner(cwd=tmp_path, timeout=0.2, max_output=1024, executable=str(fake))
    with pytest.raises(GitError, match="timed out"):
        slow.run("status")
