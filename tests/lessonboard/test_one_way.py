"""One way to do each thing: the project's one poll-with-deadline, its one directory fsync (which the WAL
uses and which fails loudly), and an embeddings loader that refuses a model it does not know."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from lessonboard import files, waiting
from lessonq.wal import Wal, WalJob
from lessons import embeddings


def test_poll_returns_the_first_truthy_value_and_sleeps_between_looks(monkeypatch: Any) -> None:
    slept: list[float] = []
    monkeypatch.setattr(waiting, "sleep", slept.append)
    answers = iter([0, "", "ready", "later"])
    assert waiting.poll(lambda: next(answers), timeout=60, interval=0.25) == "ready"
    assert slept == [0.25, 0.25]


def test_poll_gives_the_last_falsy_value_once_the_deadline_passed(monkeypatch: Any) -> None:
    looks: list[int] = []
    monkeypatch.setattr(waiting, "sleep", lambda seconds: None)
    assert waiting.poll(lambda: looks.append(1) or 0, timeout=0.0) == 0
    assert looks == [1]  # it looked once, at the deadline


def refuse_fsync(monkeypatch: Any) -> None:
    real = os.fsync

    def fsync(fd: int) -> None:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, "directory fsync refused (test)")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_a_failed_directory_fsync_is_an_error_for_the_wal_too(tmp_path: Path, monkeypatch: Any) -> None:
    wal = Wal(tmp_path / "wal", quarantine_dir=tmp_path / "quarantine")
    refuse_fsync(monkeypatch)
    with pytest.raises(OSError, match="directory fsync refused"):
        files.fsync_dir(tmp_path)
    job = WalJob(id="00000000000000a1", task="t", outcome="ERROR: x", trigger="error")
    with pytest.raises(OSError, match="directory fsync refused"):
        wal.append(job)  # the append cannot promise a durable record: ingest must not answer 202


def test_an_unknown_local_model_is_an_error_not_another_model(settings: Any) -> None:
    with pytest.raises(embeddings.EmbeddingError, match="'nope'"):
        embeddings.load("local", "nope")
    settings.EMBEDDING_LOCAL_MODEL = "from-the-setting"  # the default is the setting's value
    with pytest.raises(embeddings.EmbeddingError, match="'from-the-setting'"):
        embeddings.load("local")
