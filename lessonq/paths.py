"""This node's WAL and DLQ directories under ``LESSONQ_BASE_DIR``."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from lessonq.wal import Wal


def base() -> Path:
    return Path(settings.LESSONQ_BASE_DIR)


def wal() -> Wal:
    return Wal(base() / "wal", quarantine_dir=base() / "quarantine", tmp_grace=settings.LESSONQ_TMP_GRACE)


def dlq() -> Wal:
    return Wal(base() / "dlq", quarantine_dir=base() / "quarantine", tmp_grace=settings.LESSONQ_TMP_GRACE)


def expired_dir() -> Path:
    return base() / "expired"
