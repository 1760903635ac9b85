"""Adopting a chatcli reflexion base dir (``manage.py lessonq import DIR``): its ``wal/`` and ``dlq/``
records become this node's jobs with their JobIDs, attempts and errors. Records are copied byte for
byte; corrupt ones are copied to ``quarantine/`` (the source dir is never modified). Running it again
is a no-op: known JobIDs are skipped."""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from django.db import DatabaseError, InterfaceError, OperationalError, transaction

from lessonq import metrics
from lessonq.dispatch import dispatch
from lessonq.ingest import record_from_wal
from lessonq.jobid import is_job_id
from lessonq.models import Job, JobState
from lessonq.paths import base, dlq, wal
from lessonq.wal import REASON_SUFFIX, SUFFIX, CorruptRecord, Wal, WalError, decode, unframe


@dataclass
class ImportReport:
    active: int = 0
    dead: int = 0
    known: int = 0
    quarantined: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class AdoptionError(Exception):
    pass


def import_base_dir(source: Path) -> ImportReport:
    source = Path(source)
    if not source.is_dir():
        raise AdoptionError(f"{source} is not a directory")
    if not (source / "wal").is_dir() and not (source / "dlq").is_dir():
        raise AdoptionError(f"{source} has neither wal/ nor dlq/: not a chatcli reflexion base dir")
    report = ImportReport()
    for kind, target, state in (("wal", wal(), JobState.PENDING), ("dlq", dlq(), JobState.DEAD)):
        folder = source / kind
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if not path.is_file() or not path.name.endswith(SUFFIX) or ".tmp." in path.name:
                continue
            _adopt(path, kind, target, state, report)
    return report


def _adopt(path: Path, kind: str, target: Wal, state: str, report: ImportReport) -> None:
    data = path.read_bytes()
    try:
        record = decode(unframe(data))
        if not is_job_id(record.id) or path.name != f"{record.id}{SUFFIX}":
            raise CorruptRecord(f"job id {record.id!r} does not match its file name")
    except CorruptRecord as exc:
        _quarantine_copy(path, kind, str(exc))
        report.quarantined += 1
        return
    if Job.objects.filter(pk=record.id).exists():
        report.known += 1
        return
    # One record that cannot be adopted (a value the database refuses) is copied to quarantine/ with its
    # reason; the others are still imported (docs/operations.md#poison-records).
    try:
        with transaction.atomic():
            job = record_from_wal(record, state=state)
            if state == JobState.DEAD:
                job.mark_dead(record.last_error)
            target.put_bytes(record.id, data)  # before the commit: a crash in between leaves a record to adopt
            if state != JobState.DEAD:
                dispatch(job)
    except (OperationalError, InterfaceError):
        raise  # the database is down: no record is at fault
    except (DatabaseError, ValueError, WalError) as exc:
        _quarantine_copy(path, kind, f"cannot be adopted: {type(exc).__name__}: {exc}", poison=True)
        report.quarantined += 1
        return
    if state == JobState.DEAD:
        report.dead += 1
    else:
        report.active += 1


def _quarantine_copy(path: Path, kind: str, reason: str, *, poison: bool = False) -> None:
    folder = base() / "quarantine"
    folder.mkdir(mode=0o750, parents=True, exist_ok=True)
    target = folder / f"import-{kind}-{path.name}"
    if not target.exists():
        shutil.copyfile(path, target)
        target.chmod(0o600)
        reason_file = target.with_name(target.name + REASON_SUFFIX)
        reason_file.write_text(reason[:2000] + "\n", encoding="utf-8", errors="backslashreplace")
        reason_file.chmod(0o600)
        (metrics.POISON_RECORDS if poison else metrics.WAL_CORRUPTION).inc()
