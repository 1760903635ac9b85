"""The systemd units of deploy/systemd/ are the ones docs/deployment.md shows, systemd accepts them, and
they give every service of a host one metrics directory that a unit's start cleans of dead processes'
files only (RuntimeDirectory= kept across stops)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
DEPLOYMENT = ROOT / "docs" / "deployment.md"


def settings_of(unit: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def test_the_docs_show_exactly_the_shipped_units() -> None:
    assert [u.name for u in UNITS] == [
        "lessonboard-beat.service",
        "lessonboard-web.service",
        "lessonboard-worker.service",
    ]
    docs = DEPLOYMENT.read_text()
    for unit in UNITS:
        assert f"```ini\n{unit.read_text()}```" in docs, unit.name


def test_every_unit_shares_one_metrics_directory_per_host_and_cleans_only_dead_processes_files() -> None:
    for unit in UNITS:
        found = settings_of(unit)
        assert found["RuntimeDirectory"] == ["lessonboard/metrics"], unit.name
        assert found["RuntimeDirectoryPreserve"] == ["yes"], unit.name  # a stop must not delete the others' files
        assert found["Environment"] == ["PROMETHEUS_MULTIPROC_DIR=/run/lessonboard/metrics"], unit.name
        assert found["ExecStartPre"] == [
            "/srv/lessonboard/.venv/bin/python -m lessonboard.multiproc /run/lessonboard/metrics"
        ], unit.name
        assert found["User"] == ["lessonboard"], unit.name
    beat = settings_of(ROOT / "deploy" / "systemd" / "lessonboard-beat.service")
    assert "breaker probe" in beat["Description"][0] and "re-publish" in beat["Description"][0]


def test_the_clean_up_command_of_the_units_runs_and_keeps_live_processes_files(tmp_path: Path) -> None:
    [command] = settings_of(UNITS[0])["ExecStartPre"]
    argv = shlex.split(command.replace("/srv/lessonboard/.venv/bin/python", sys.executable))
    argv[-1] = str(tmp_path)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / f"counter_{int(gone.stdout)}.db").write_bytes(b"x")
    (tmp_path / f"counter_{os.getpid()}.db").write_bytes(b"x")
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert [p.name for p in tmp_path.iterdir()] == [f"counter_{os.getpid()}.db"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    """``systemd-analyze verify`` on copies pointing at this checkout (it checks that the commands exist)."""
    import grp
    import pwd

    (tmp_path / "env").write_text("")
    user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    for unit in UNITS:
        text = (
            unit.read_text()
            .replace("/srv/lessonboard", str(ROOT))
            .replace("/etc/lessonboard/env", str(tmp_path / "env"))
        )
        text = text.replace("User=lessonboard", f"User={user}").replace("Group=lessonboard", f"Group={group}")
        (tmp_path / unit.name).write_text(text)
    run = subprocess.run(
        ["systemd-analyze", "verify", *[str(tmp_path / u.name) for u in UNITS]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and not (run.stdout + run.stderr).strip(), run.stdout + run.stderr
