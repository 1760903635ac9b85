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
from typing import Any

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
        assert found["Environment"][0] == "PROMETHEUS_MULTIPROC_DIR=/run/lessonboard/metrics", unit.name
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


def unit_command(unit: Path, key: str, run_dir: Path, port: int) -> list[str]:
    """A unit's ``key=`` command line, pointed at this checkout, ``run_dir`` for /run/lessonboard/metrics
    and a free port; one gunicorn worker and one worker child instead of four (two shared cores)."""
    [line] = [x for x in unit.read_text().splitlines() if x.startswith(key + "=")]
    line = line.removeprefix(key + "=").replace("/srv/lessonboard/.venv/bin/python", sys.executable)
    line = line.replace("/srv/lessonboard/.venv/bin/", str(Path(sys.executable).parent) + "/")
    line = line.replace("/run/lessonboard/metrics", str(run_dir)).replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    return shlex.split(line.replace("--workers 4", "--workers 1").replace("--concurrency 4", "--concurrency 1"))


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_node_started_from_the_units_reports_itself_and_its_web_serves_the_workers_series(
    queue_dir: Path, settings: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from lessonq.models import LeaderLease, NodeLease
    from tests.support.processes import ManagedProcess, free_port, subprocess_env
    from tests.support.wait import wait_for

    node, port, run_dir = settings.NODE, free_port(), tmp_path / "run" / "lessonboard" / "metrics"
    run_dir.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (run_dir / f"counter_{int(dead.stdout)}.db").write_bytes(b"stale")  # a process of the last boot
    LeaderLease.objects.all().delete()
    env = subprocess_env(
        LESSONBOARD_NODE=node,
        LESSONQ_BASE_DIR=str(queue_dir),
        LESSONBOARD_METRICS_ALLOWED_ADDRESSES="127.0.0.1",
        LESSONQ_NODE_LEASE="3s",
        LESSONQ_NODE_LEASE_RENEW="500ms",
    )
    env["LESSONBOARD_DATA_DIR"] = str(settings.DATA_DIR)
    for unit in UNITS:  # beat, web, worker: each unit's ExecStartPre, then its ExecStart
        unit_env = {**env}
        for assignment in settings_of(unit)["Environment"]:
            key, _, value = assignment.partition("=")
            unit_env[key] = value.replace("/run/lessonboard/metrics", str(run_dir))
        pre = subprocess.run(
            unit_command(unit, "ExecStartPre", run_dir, port),
            cwd=ROOT,
            env=unit_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert pre.returncode == 0, pre.stderr
        process = ManagedProcess(unit.stem, unit_command(unit, "ExecStart", run_dir, port), unit_env)
        request.addfinalizer(process.stop)
    assert not (run_dir / f"counter_{int(dead.stdout)}.db").exists()

    def node_reports_itself() -> bool:
        lease = NodeLease.objects.filter(node=f"lessonq.{node}", epoch__gt=0, web_seen_at__isnull=False).first()
        leader = LeaderLease.objects.filter(name="scheduler", holder__startswith=f"{node}:").first()
        return lease is not None and leader is not None

    wait_for(node_reports_itself, timeout=120, what="the worker's lease, the web's stamp and beat's scheduler lease")

    def workers_series_on_the_web() -> bool:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        return f'lessonboard_worker_heartbeats_total{{node="{node}"}}' in text  # written by the worker's keeper

    wait_for(workers_series_on_the_web, timeout=60, what="the worker's series on the web's /metrics")
    assert len(list(run_dir.glob("*.db"))) > 0
