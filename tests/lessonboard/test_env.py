import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from lessonboard.env import Env, database_from_url, parse_duration


def test_it_reads_booleans_the_chatcli_way():
    env = Env({"A": " Yes ", "B": "off", "C": "t"})
    assert env.flag("A", False) is True
    assert env.flag("B", True) is False
    assert env.flag("C", False) is True
    assert env.flag("MISSING", True) is True


def test_it_names_the_variable_when_a_value_is_bad():
    env = Env({"LESSONQ_WORKERS": "two", "X": "maybe", "D": "5 days", "P": "0", "M": "INFO"})
    with pytest.raises(ImproperlyConfigured, match="LESSONQ_WORKERS='two' is not an integer"):
        env.integer("LESSONQ_WORKERS", 2)
    with pytest.raises(ImproperlyConfigured, match="X='maybe' is not a boolean"):
        env.flag("X", False)
    with pytest.raises(ImproperlyConfigured, match="D='5 days' is not a duration"):
        env.duration("D", 1.0)
    with pytest.raises(ImproperlyConfigured, match="P=0 is below the minimum 1"):
        env.integer("P", 8000, minimum=1)
    with pytest.raises(ImproperlyConfigured, match="M='verbose' is not one of"):
        Env({"M": "verbose"}).choice("M", "info", ("info", "debug"))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("300ms", 0.3), ("5s", 5.0), ("2m", 120.0), ("168h", 604800.0), ("2h30m", 9000.0), ("1.5s", 1.5), ("7", 7.0)],
)
def test_it_parses_go_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5d", "s", "5 s", "-", "1h-2m"])
def test_it_rejects_what_go_would_reject(text):
    assert parse_duration(text) is None


def test_it_splits_lists_like_chatcli():
    assert Env({"L": " Formatter, deps,,REFINER ,"}).items("L", []) == ["formatter", "deps", "refiner"]


def test_it_builds_a_database_entry_from_a_url():
    db = database_from_url("postgresql://u:p%40ss@db.example:5433/lb?sslmode=require")
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == ("lb", "u", "p@ss", "db.example", "5433")
    assert db["OPTIONS"] == {"sslmode": "require"}
    socket_db = database_from_url("postgresql://postgres@/lessonboard?host=/var/run/pg")
    assert socket_db["HOST"] == "/var/run/pg"
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL must be a postgresql"):
        database_from_url("mysql://x/y")


def test_it_refuses_to_start_with_a_bad_setting():
    """A real start-up: Django's setup in a fresh interpreter stops with the variable's name."""
    code = "import django; django.setup()"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={
            "DJANGO_SETTINGS_MODULE": "lessonboard.settings",
            "LESSONBOARD_ENV_FILE": "",
            "LESSONBOARD_DATA_DIR": os.environ["LESSONBOARD_DATA_DIR"],
            "LESSONBOARD_PORT": "eighty",
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode != 0
    assert "LESSONBOARD_PORT='eighty' is not an integer" in result.stderr


def test_the_queue_worker_count_sizes_the_workers_unless_overridden():
    code = "import django; django.setup(); from django.conf import settings; print(settings.WORKER_CONCURRENCY)"
    base = {
        "DJANGO_SETTINGS_MODULE": "lessonboard.settings",
        "LESSONBOARD_ENV_FILE": "",
        "LESSONBOARD_DATA_DIR": os.environ["LESSONBOARD_DATA_DIR"],
        "PATH": "/usr/bin:/bin",
    }
    root = Path(__file__).resolve().parents[2]

    def concurrency(**extra: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", code], env={**base, **extra}, capture_output=True, text=True, cwd=root
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert concurrency() == "2"
    assert concurrency(LESSONQ_WORKERS="3") == "3"
    assert concurrency(LESSONQ_WORKERS="3", LESSONBOARD_WORKER_CONCURRENCY="1") == "1"


def test_the_declared_reader_applies_the_declared_default_and_bounds():
    from lessonboard.config import Reader

    assert Reader({})("LESSONBOARD_PORT") == 8000
    assert Reader({"LESSONBOARD_PORT": "9000"})("LESSONBOARD_PORT") == 9000
    with pytest.raises(ImproperlyConfigured, match="LESSONBOARD_PORT=70000 is above the maximum 65535"):
        Reader({"LESSONBOARD_PORT": "70000"})("LESSONBOARD_PORT")
    with pytest.raises(ImproperlyConfigured, match=r"LESSONQ_JITTER=0\.9 is above the maximum 0\.5"):
        Reader({"LESSONQ_JITTER": "0.9"})("LESSONQ_JITTER")
    assert Reader({"LESSONBOARD_LOGIN_LOCKOUT": "2m"})("LESSONBOARD_LOGIN_LOCKOUT") == 120.0


def test_the_declared_reader_refuses_an_undeclared_variable_and_a_missing_computed_default():
    from lessonboard.config import Reader

    with pytest.raises(KeyError, match="LESSONBOARD_NOT_DECLARED is not declared"):
        Reader({})("LESSONBOARD_NOT_DECLARED")
    with pytest.raises(TypeError, match="LESSONBOARD_NODE's default is computed"):
        Reader({})("LESSONBOARD_NODE")
    assert Reader({})("LESSONBOARD_NODE", default="n1") == "n1"
