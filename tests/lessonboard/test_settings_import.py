"""Importing the settings touches no disk; Django's start makes the data dir's folders and one secret key.

Each case runs a fresh Python process against a data dir of its own (this process's settings are loaded
already): what a first ``manage.py`` command, ``serve``, or a gunicorn or Celery child does on a new clone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lessonboard import files

ROOT = Path(__file__).resolve().parents[2]
SETUP = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    # The default (embedded) broker, whose folders are part of the layout checked here, even on a run whose
    # tests use Redis (CI's second pass sets CELERY_BROKER_URL).
    dropped = {"PROMETHEUS_MULTIPROC_DIR", "LESSONBOARD_SECRET_KEY", "CELERY_BROKER_URL"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        LESSONBOARD_DATA_DIR=str(data_dir),
        LESSONBOARD_ENV_FILE="",
        DJANGO_SETTINGS_MODULE="lessonboard.settings",
        PYTHONDONTWRITEBYTECODE="1",
        **extra,
    )
    return env


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_importing_the_settings_leaves_an_absent_data_dir_absent(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    done = _python("import lessonboard.settings as s; print(s.DATA_DIR, repr(s.SECRET_KEY))", _env(data_dir))
    assert done.returncode == 0, done.stderr
    assert str(data_dir) in done.stdout and "''" in done.stdout  # no key yet: nothing was generated
    assert not data_dir.exists()
    assert list(tmp_path.iterdir()) == []


def test_importing_the_settings_leaves_an_empty_data_dir_empty(tmp_path: Path) -> None:
    done = _python("import lessonboard.settings", _env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_django_start_makes_the_folders_and_one_secret_key_kept_across_processes(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    env = _env(data_dir)
    # Two processes start on the new data dir at once: both must end with the same key, the file's.
    racing = [
        subprocess.Popen([sys.executable, "-c", SETUP], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    keys = {proc.communicate(timeout=120)[0].strip() for proc in racing}
    assert all(proc.returncode == 0 for proc in racing)
    key_file = data_dir / "secret_key"
    assert keys == {key_file.read_text().strip()}
    assert len(keys.pop()) >= 32
    assert key_file.stat().st_mode & 0o777 == 0o600
    for folder in ("static", "metrics", "broker/queue", "broker/control", "lessonq/wal", "lessonq/dlq"):
        assert (data_dir / folder).is_dir(), folder
    assert not [p for p in data_dir.iterdir() if p.name.endswith(".tmp")]  # no temp file left behind
    # A later process reads the same key (sessions survive a restart).
    later = _python(SETUP, env)
    assert later.returncode == 0, later.stderr
    assert later.stdout.strip() == key_file.read_text().strip()


def test_a_configured_secret_key_writes_no_key_file(tmp_path: Path) -> None:
    done = _python(SETUP, _env(tmp_path, LESSONBOARD_SECRET_KEY="k" * 40))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "k" * 40
    assert not (tmp_path / "secret_key").exists()


def test_a_data_dir_that_cannot_be_made_stops_start_up_naming_the_variable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = _python(SETUP, _env(blocker / "data"))
    assert done.returncode != 0
    assert f"LESSONBOARD_DATA_DIR={blocker / 'data'} cannot be created" in done.stderr


def test_create_atomic_keeps_the_first_file(tmp_path: Path) -> None:
    path = tmp_path / "key"
    assert files.create_atomic(path, b"first\n", mode=0o600) is True
    assert files.create_atomic(path, b"second\n", mode=0o600) is False
    assert path.read_bytes() == b"first\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key"]
