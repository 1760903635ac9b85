"""``manage.py lessonq import DIR`` adopts chatcli's wal/ and dlq/ records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from lessonq.models import Job, JobState
from lessonq.paths import dlq, wal
from lessonq.wal import WalJob, frame

pytestmark = pytest.mark.django_db
BRT = timezone(timedelta(hours=-3))


def chatcli_dir(root: Path) -> Path:
    src = root / ".chatcli" / "reflexion"
    (src / "wal").mkdir(parents=True)
    (src / "dlq").mkdir()
    now = datetime.now(BRT)
    pending = WalJob(
        id="bba86ebf380b9dbc",
        task="Edit main.go",
        attempt="x" * 5000,
        outcome="ERROR: file too large",
        trigger="error",
        enqueued_at=now,
        next_attempt_at=now,
        attempts=2,
        last_error="timeout",
    )
    dead = WalJob(
        id="e8feb2353142f8ae",
        task="t1",
        attempt="attempt",
        outcome="ERROR: x",
        trigger="error",
        enqueued_at=now,
        next_attempt_at=datetime(2026, 4, 22, 21, tzinfo=UTC),
        attempts=5,
        last_error="provider 500",
    )
    (src / "wal" / f"{pending.id}.wal").write_bytes(frame(pending.payload()))
    (src / "dlq" / f"{dead.id}.wal").write_bytes(frame(dead.payload()))
    (src / "wal" / "0000000000000bad.wal").write_bytes(frame(pending.payload())[:-4])
    (src / "wal" / "x.tmp.1.1").write_bytes(b"partial")
    return src


def run(*args: str) -> str:
    out = StringIO()
    call_command("lessonq", *args, stdout=out)
    return out.getvalue()


def test_it_adopts_records_with_their_ids_attempts_and_errors(
    queue_dir: Path, tmp_path: Path, fake_openai: Any
) -> None:
    src = chatcli_dir(tmp_path)
    assert run("import", str(src)) == (
        "imported 1 pending and 1 dead job(s); 0 already known; 1 corrupt record(s) quarantined\n"
    )
    pending, dead = Job.objects.get(pk="bba86ebf380b9dbc"), Job.objects.get(pk="e8feb2353142f8ae")
    assert (pending.state, pending.attempts, pending.last_error, len(pending.output)) == (
        JobState.PENDING,
        2,
        "timeout",
        5000,
    )
    assert (dead.state, dead.attempts, dead.last_error) == (JobState.DEAD, 5, "provider 500")
    assert wal().path(pending.pk).read_bytes() == (src / "wal" / f"{pending.pk}.wal").read_bytes()
    assert dlq().path(dead.pk).read_bytes() == (src / "dlq" / f"{dead.pk}.wal").read_bytes()
    assert (queue_dir / "quarantine" / "import-wal-0000000000000bad.wal").exists()
    assert (src / "wal" / "0000000000000bad.wal").exists()  # the source is left alone


def test_running_it_twice_is_a_no_op(queue_dir: Path, tmp_path: Path, fake_openai: Any) -> None:
    src = chatcli_dir(tmp_path)
    run("import", str(src))
    before = sorted(p.name for p in (queue_dir / "wal").iterdir()), Job.objects.count()
    assert run("import", str(src), "--json") == '{"active": 0, "dead": 0, "known": 2, "quarantined": 1}\n'
    assert (sorted(p.name for p in (queue_dir / "wal").iterdir()), Job.objects.count()) == before


def test_it_fails_with_a_message_for_a_wrong_dir(queue_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="not a chatcli reflexion base dir"):
        run("import", str(tmp_path))
    with pytest.raises(CommandError, match="is not a directory"):
        run("import", str(tmp_path / "missing"))
