"""chatcli's lessonq WAL (docs/compat/chatcli.md#wal-envelope, docs/compat/chatcli.md#wal): one framed record per job, ``<dir>/<JobID>.wal``.

Framing (big-endian): ``LSN1`` | payload length | CRC-32 | payload (the JSON envelope) | CRC-32 again.
The same class serves the active WAL (``wal/``) and the dead-letter queue (``dlq/``).

Unlike chatcli: records are read fully (chatcli loses records over ~4 KiB, docs/compat/chatcli.md#wal-reading); corrupt or torn
records are moved to ``quarantine/`` instead of deleted; leftover ``.tmp.`` files are removed only
after a grace period, so a listing never races an append in flight; and appends use ``link()`` rather
than ``rename()`` so that two processes appending the same JobID at once produce one record and
exactly one of them learns it was new.
"""

from __future__ import annotations

import builtins
import itertools
import logging
import os
import re
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from lessonboard.files import fsync_dir
from lessonq import gojson, metrics
from lessonq.jobid import go_trim

log = logging.getLogger(__name__)

MAGIC = b"LSN1"
HEADER = struct.Struct(">4sII")
TRAILER = struct.Struct(">I")
MAX_PAYLOAD = 16 << 20  # 16 MiB, chatcli's limit
RECORD_VERSION = 1
SUFFIX = ".wal"
REASON_SUFFIX = ".reason"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DIR_MODE = 0o750
FILE_MODE = 0o600
_SEQ = itertools.count(1)  # per process, like chatcli's per-instance counter: temp names never collide
_SEQ_LOCK = threading.Lock()
_SURROGATE = re.compile("[\ud800-\udfff]")


class WalError(Exception):
    pass


class PayloadTooLarge(WalError):
    def __init__(self, size: int) -> None:
        super().__init__(f"payload too large ({size} bytes)")
        self.size = size


class CorruptRecord(WalError):
    pass


@dataclass(frozen=True)
class WalJob:
    """chatcli's ``LessonJob`` (docs/compat/chatcli.md#lesson-job): the request plus its retry state."""

    id: str
    task: str = ""
    attempt: str = ""
    outcome: str = ""
    trigger: str = ""
    enqueued_at: datetime = gojson.GO_ZERO_TIME
    next_attempt_at: datetime = gojson.GO_ZERO_TIME
    attempts: int = 0
    last_error: str = ""
    # lessonboard's own: who sent the trigger (docs/compat/chatcli.md#wal-envelope). A row adopted from the
    # record alone (its insert failed, or a sweep listed the record first) keeps its workspace, agent and
    # token. Empty for chatcli's records and for triggers sent without them.
    workspace: str = ""
    agent: str = ""
    token_id: int = 0

    def envelope(self) -> dict[str, Any]:
        envelope: dict[str, Any] = {
            "v": RECORD_VERSION,
            "job": {
                "ID": self.id,
                "Request": {
                    "Task": self.task,
                    "Attempt": self.attempt,
                    "Outcome": self.outcome,
                    "Trigger": self.trigger,
                },
                "EnqueuedAt": gojson.format_time(self.enqueued_at),
                "NextAttemptAt": gojson.format_time(self.next_attempt_at),
                "Attempts": self.attempts,
                "LastError": self.last_error,
            },
        }
        if self.workspace or self.agent or self.token_id:
            # A third key, which chatcli's reader (Go's encoding/json) ignores as unknown.
            envelope["lb"] = {"Workspace": self.workspace, "Agent": self.agent, "Token": self.token_id}
        return envelope

    def payload(self) -> bytes:
        return gojson.dumps(self.envelope()).encode("utf-8")

    def with_retry(self, *, attempts: int, next_attempt_at: datetime, last_error: str) -> WalJob:
        return replace(self, attempts=attempts, next_attempt_at=next_attempt_at, last_error=last_error)


# --- framing ------------------------------------------------------------------------------------------
def frame(payload: bytes) -> bytes:
    crc = zlib.crc32(payload)
    return HEADER.pack(MAGIC, len(payload), crc) + payload + TRAILER.pack(crc)


def unframe(data: bytes) -> bytes:
    """The payload of a framed record, or ``CorruptRecord`` naming what is wrong (chatcli's wording)."""
    if len(data) < HEADER.size:
        raise CorruptRecord("short header")
    magic, length, crc = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptRecord(f"bad magic {magic!r}")
    if length == 0 or length > MAX_PAYLOAD:
        raise CorruptRecord(f"bad payload length {length}")
    payload = data[HEADER.size : HEADER.size + length]
    if len(payload) != length:
        raise CorruptRecord("truncated payload")
    if zlib.crc32(payload) != crc:
        raise CorruptRecord("leading crc mismatch")
    trailer = data[HEADER.size + length : HEADER.size + length + TRAILER.size]
    if len(trailer) != TRAILER.size or TRAILER.unpack(trailer)[0] != crc:
        raise CorruptRecord("trailing crc mismatch (torn write?)")
    return payload


def decode(payload: bytes) -> WalJob:
    """Parse an envelope as Go's ``encoding/json`` would: keys case-insensitive, unknown keys ignored,
    missing keys zero; ``v`` must be 1."""
    import json

    # Nearly every record is the canonical envelope: orjson reads it at four times json's speed. Anything
    # it refuses or reads differently (integers past 64 bits become floats there, lone surrogate escapes
    # are refused) is not canonical, and json decides it by the rules below, exactly as before.
    try:
        quick = orjson.loads(payload)
    except orjson.JSONDecodeError:
        quick = None
    if type(quick) is dict:
        fast = _decode_canonical(quick)
        if fast is not None:
            return fast
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CorruptRecord(f"bad json: {exc}") from exc
    if not isinstance(data, dict):
        raise CorruptRecord("envelope is not an object")
    fast = _decode_canonical(data)
    if fast is not None:
        return fast
    env = _fold(data)
    version = env.get("v", 0)
    if version != RECORD_VERSION:
        raise CorruptRecord(f"unsupported record version {version}")
    job = _fold(env.get("job") or {})
    req = _fold(job.get("request") or {})
    sender = _fold(env.get("lb") or {})
    try:
        enqueued = _time(job.get("enqueuedat"))
        return WalJob(
            id=_str(job.get("id")),
            task=_str(req.get("task")),
            attempt=_str(req.get("attempt")),
            outcome=_str(req.get("outcome")),
            trigger=_str(req.get("trigger")),
            # A zero EnqueuedAt becomes the Unix epoch so that stale filtering discards it (as chatcli).
            enqueued_at=EPOCH if enqueued == gojson.GO_ZERO_TIME else enqueued,
            next_attempt_at=_time(job.get("nextattemptat")),
            attempts=int(job.get("attempts") or 0),
            last_error=_str(job.get("lasterror")),
            workspace=_str(sender.get("workspace")),
            agent=_str(sender.get("agent")),
            token_id=int(sender.get("token") or 0),
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise CorruptRecord(f"bad job fields: {exc}") from exc


_ENVELOPE_KEYS = frozenset(("v", "job"))
_ENVELOPE_KEYS_SENDER = frozenset(("v", "job", "lb"))
_CANONICAL_JOB = frozenset(("ID", "Request", "EnqueuedAt", "NextAttemptAt", "Attempts", "LastError"))
_CANONICAL_REQUEST = frozenset(("Task", "Attempt", "Outcome", "Trigger"))
_CANONICAL_SENDER = frozenset(("Workspace", "Agent", "Token"))


def _decode_canonical(data: dict[str, Any]) -> WalJob | None:
    """The envelope exactly as chatcli and we write it (every record, in practice), read without the
    case folding; ``None`` sends anything else through ``decode``'s general rules. A replay decodes
    100,000s of these, so each step is the cheapest that says the same: key sets compared whole, the
    types checked one by one, and the record built without the frozen dataclass's per-field
    ``object.__setattr__`` (a third of the time)."""
    keys = data.keys()
    if (keys != _ENVELOPE_KEYS and keys != _ENVELOPE_KEYS_SENDER) or data["v"] != RECORD_VERSION:
        return None
    workspace = agent = ""
    token_id = 0
    if "lb" in data:
        sender = data["lb"]
        if type(sender) is not dict or sender.keys() != _CANONICAL_SENDER:
            return None
        workspace, agent, token_id = sender["Workspace"], sender["Agent"], sender["Token"]
        if not (type(workspace) is str and type(agent) is str and type(token_id) is int):
            return None
        if not (workspace + agent).isascii():
            workspace, agent = _str(workspace), _str(agent)
    job = data["job"]
    if type(job) is not dict or job.keys() != _CANONICAL_JOB:
        return None
    req = job["Request"]
    if type(req) is not dict or req.keys() != _CANONICAL_REQUEST:
        return None
    jid, attempts, last_error = job["ID"], job["Attempts"], job["LastError"]
    task, attempt, outcome, trigger = req["Task"], req["Attempt"], req["Outcome"], req["Trigger"]
    if not (
        type(jid) is str
        and type(last_error) is str
        and type(task) is str
        and type(attempt) is str
        and type(outcome) is str
        and type(trigger) is str
        and type(attempts) is int
    ):
        return None
    texts = (jid, task, attempt, outcome, trigger, last_error)
    if not "".join(texts).isascii():  # json read it (orjson refuses a lone surrogate escape): Go's U+FFFD rule
        jid, task, attempt, outcome, trigger, last_error = map(_str, texts)
    try:
        enqueued = _time(job["EnqueuedAt"])
        # A new record is due when it was enqueued: the same text, parsed once.
        next_attempt = enqueued if job["NextAttemptAt"] == job["EnqueuedAt"] else _time(job["NextAttemptAt"])
    except (TypeError, ValueError) as exc:
        raise CorruptRecord(f"bad job fields: {exc}") from exc
    record: WalJob = object.__new__(WalJob)
    record.__dict__.update(
        id=jid,
        task=task,
        attempt=attempt,
        outcome=outcome,
        trigger=trigger,
        enqueued_at=EPOCH if enqueued == gojson.GO_ZERO_TIME else enqueued,
        next_attempt_at=next_attempt,
        attempts=attempts,
        last_error=last_error,
        workspace=workspace,
        agent=agent,
        token_id=token_id,
    )
    return record


def _fold(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise CorruptRecord("expected an object")
    return {str(k).lower(): v for k, v in obj.items()}


def _str(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    # Go's decoder turns a lone surrogate escape ("\ud800") into U+FFFD; so does this one, so a record
    # read here can always be written back.
    return value if value.isascii() else _SURROGATE.sub("\ufffd", value)


def _time(value: Any) -> datetime:
    if value in (None, ""):
        return gojson.GO_ZERO_TIME
    return gojson.parse_time(_str(value))


# --- the directory -----------------------------------------------------------------------------------
READ_AHEAD = 1 << 16  # one read() holds a typical record whole


def read_record(path: str, *, dir_fd: int | None = None) -> bytes:
    """The bytes of one record file, read with plain ``os`` calls (a replay reads 100,000s of these;
    ``open()``'s buffered file object costs more than the read itself): the frame's header says how
    much to read, so a small record takes one read. Bytes past the frame are never looked at.
    ``dir_fd``: ``path`` is a name in that open directory (the kernel does not walk the whole path)."""
    fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
    try:
        data = os.read(fd, READ_AHEAD)
        if len(data) < HEADER.size:
            return data
        want = HEADER.size + min(HEADER.unpack_from(data)[1], MAX_PAYLOAD) + TRAILER.size
        while len(data) < want:
            more = os.read(fd, want - len(data))
            if not more:
                break
            data += more
        return data
    finally:
        os.close(fd)


@dataclass
class Listing:
    jobs: list[WalJob] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    tmp_removed: int = 0


class Wal:
    """One WAL directory (active or DLQ). Safe across threads and processes."""

    def __init__(self, directory: Path, *, quarantine_dir: Path, tmp_grace: float = 600.0) -> None:
        self.dir = Path(directory)
        self.quarantine_dir = Path(quarantine_dir)
        self.tmp_grace = tmp_grace
        for d in (self.dir, self.quarantine_dir):
            d.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)

    def path(self, job_id: str) -> Path:
        job_id = go_trim(job_id)
        if not job_id or "/" in job_id or "\x00" in job_id or job_id.startswith("."):
            raise WalError("lessonq wal: empty JobID" if not job_id else f"lessonq wal: bad JobID {job_id!r}")
        return self.dir / f"{job_id}{SUFFIX}"

    def exists(self, job_id: str) -> bool:
        return self.path(job_id).exists()

    def _write_tmp(self, job_id: str, data: bytes) -> Path:
        with _SEQ_LOCK:
            seq = next(_SEQ)
        tmp = self.dir / f"{job_id}.tmp.{os.getpid()}.{seq}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        return tmp

    def _encode(self, job: WalJob) -> bytes:
        payload = job.payload()
        if len(payload) > MAX_PAYLOAD:
            raise PayloadTooLarge(len(payload))
        return frame(payload)

    def append(self, job: WalJob) -> bool:
        """Write a new record durably; ``False`` (and nothing written) when ``<id>.wal`` already exists."""
        from lessonq import faults

        final = self.path(job.id)
        if final.exists():
            return False
        tmp = self._write_tmp(job.id, self._encode(job))
        faults.point("wal.append.after_tmp")
        try:
            os.link(tmp, final)  # atomic and never overwrites: the loser of a race sees FileExistsError
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(self.dir)
        return True

    def append_many(self, jobs: list[WalJob]) -> list[bool]:
        """``append`` for a batch: each record written and fsynced and linked in place, then one
        directory fsync for all of them. When it returns, every record is durable; each entry says
        whether that record was new (``False``: one existed, left as it was)."""
        from lessonq import faults

        created: list[bool] = []
        for job in jobs:
            final = self.path(job.id)
            if final.exists():
                created.append(False)
                continue
            tmp = self._write_tmp(job.id, self._encode(job))
            faults.point("wal.append.after_tmp")
            try:
                os.link(tmp, final)
                created.append(True)
            except FileExistsError:
                created.append(False)
            finally:
                tmp.unlink(missing_ok=True)
        if any(created):
            fsync_dir(self.dir)
        return created

    def ack_many(self, job_ids: list[str]) -> None:
        """``ack`` for a batch: unlink each record, one directory fsync."""
        removed = False
        for job_id in job_ids:
            try:
                self.path(job_id).unlink()
                removed = True
            except FileNotFoundError:
                continue
        if removed:
            fsync_dir(self.dir)

    def update(self, job: WalJob) -> None:
        """Overwrite the record (retry state) with the same tmp → fsync → rename → dir fsync path."""
        tmp = self._write_tmp(job.id, self._encode(job))
        try:
            os.replace(tmp, self.path(job.id))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(self.dir)

    def put_bytes(self, job_id: str, data: bytes) -> bool:
        """Adopt an already framed record (import) with append's no-overwrite semantics."""
        final = self.path(job_id)
        if final.exists():
            return False
        tmp = self._write_tmp(job_id, data)
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(self.dir)
        return True

    def ack(self, job_id: str) -> None:
        """Delete the record; a missing one is success."""
        if not go_trim(job_id):
            return
        try:
            self.path(job_id).unlink()
        except FileNotFoundError:
            return
        fsync_dir(self.dir)

    def move_to(self, job_id: str, directory: Path) -> Path | None:
        """Rename the record into ``directory`` (archive); ``None`` when there is no record."""
        directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        target = directory / f"{go_trim(job_id)}{SUFFIX}"
        try:
            os.replace(self.path(job_id), target)
        except FileNotFoundError:
            return None
        fsync_dir(directory)
        fsync_dir(self.dir)
        return target

    def read(self, job_id: str) -> WalJob | None:
        """The record, ``None`` when absent; ``CorruptRecord`` when unreadable (left in place)."""
        try:
            data = self.path(job_id).read_bytes()
        except FileNotFoundError:
            return None
        return decode(unframe(data))

    def quarantine(self, path: Path, reason: str, *, poison: bool = False) -> str:
        """Move an unreadable record (or, ``poison``, a readable one that cannot be handled) aside, with
        its reason in ``<name>.reason``; never deleted. The name in ``quarantine/``, or ``""`` if gone."""
        self.quarantine_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        target = self.quarantine_dir / f"{self.dir.name}-{path.name}"
        n = 1
        while target.exists():
            n += 1
            target = self.quarantine_dir / f"{self.dir.name}-{path.name}.{n}"
        try:
            os.replace(path, target)
        except FileNotFoundError:
            return ""
        # The reason beside it, for the queue page and the operator (written after the move: a crash in
        # between leaves a record without a reason, never a reason without a record).
        reason_file = target.with_name(target.name + REASON_SUFFIX)
        reason_file.write_text(reason + "\n", encoding="utf-8", errors="backslashreplace")
        reason_file.chmod(FILE_MODE)
        fsync_dir(self.quarantine_dir)
        log.warning("lessonq: record %s quarantined as %s: %s", path, target, reason)
        if poison:
            metrics.POISON_RECORDS.inc()
        else:
            metrics.WAL_CORRUPTION.inc()
        return target.name

    def names(self) -> list[str]:
        try:
            return sorted(
                e.name
                for e in os.scandir(self.dir)
                if e.is_file() and e.name.endswith(SUFFIX) and ".tmp." not in e.name
            )
        except FileNotFoundError:
            return []

    def count(self) -> int:
        return len(self.names())

    def list(self, *, on_chunk: Callable[[list[WalJob]], object] | None = None, chunk: int = 5000) -> Listing:
        """Every readable record, oldest ``EnqueuedAt`` first; corrupt ones are quarantined (and counted),
        temp files older than the grace period removed. One bad file never aborts the scan.

        ``on_chunk`` is called with every ``chunk`` records as they are read (directory order, before the
        listing is sorted), and once more with the rest: a replay puts the first records into the database
        while the scan reads the next ones. An exception it raises ends the scan."""
        listing = Listing()
        now = time.time()
        try:
            entries = list(os.scandir(self.dir))
            dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            return listing
        try:
            self._scan(entries, dir_fd, listing, now, on_chunk, chunk)
        finally:
            os.close(dir_fd)
        listing.jobs.sort(key=lambda j: (j.enqueued_at, j.id))  # ties in file-name order, as before
        return listing

    def _scan(
        self,
        entries: builtins.list[os.DirEntry[str]],
        dir_fd: int,
        listing: Listing,
        now: float,
        on_chunk: Callable[[builtins.list[WalJob]], object] | None,
        chunk: int,
    ) -> None:
        pending: builtins.list[WalJob] = []
        for entry in entries:
            if not entry.is_file(follow_symlinks=False):
                continue
            if ".tmp." in entry.name:
                path = Path(entry.path)
                try:
                    if now - entry.stat().st_mtime > self.tmp_grace:
                        path.unlink(missing_ok=True)
                        listing.tmp_removed += 1
                except FileNotFoundError:
                    pass
                continue
            if not entry.name.endswith(SUFFIX):
                continue
            try:
                job = decode(unframe(read_record(entry.name, dir_fd=dir_fd)))
                if job.id != entry.name[: -len(SUFFIX)]:
                    raise CorruptRecord(f"record id {job.id!r} does not match its file name")
            except FileNotFoundError:
                continue
            except CorruptRecord as exc:
                name = self.quarantine(Path(entry.path), str(exc))
                if name:
                    listing.quarantined.append(name)
                continue
            listing.jobs.append(job)
            if on_chunk is not None:
                pending.append(job)
                if len(pending) >= chunk:
                    on_chunk(pending)
                    pending = []
        if on_chunk is not None and pending:
            on_chunk(pending)


@dataclass(frozen=True)
class Quarantined:
    name: str
    reason: str
    quarantined_at: datetime
    size: int


def quarantined(directory: Path, *, limit: int = 100) -> tuple[list[Quarantined], int]:
    """The newest ``limit`` files in a quarantine folder with their reasons, and how many there are."""
    try:
        entries = [e for e in os.scandir(directory) if e.is_file() and not e.name.endswith(REASON_SUFFIX)]
    except FileNotFoundError:
        return [], 0
    stats = []
    for entry in entries:
        try:
            stats.append((entry, entry.stat()))
        except FileNotFoundError:
            continue
    stats.sort(key=lambda pair: pair[1].st_mtime, reverse=True)
    out = []
    for entry, st in stats[:limit]:
        try:
            reason = Path(entry.path + REASON_SUFFIX).read_text(encoding="utf-8", errors="replace").strip()
        except FileNotFoundError:
            reason = "corrupt record (no reason recorded)"
        out.append(Quarantined(entry.name, reason, datetime.fromtimestamp(st.st_mtime, UTC), st.st_size))
    return out, len(stats)
