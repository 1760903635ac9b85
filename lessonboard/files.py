"""Durable file replacement shared by every app that writes files other programs read."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a rename, link or unlink inside ``path`` survive a crash; ``OSError`` when the fsync failed.

    The one directory fsync of the project (the WAL's included). It raises rather than logs: a WAL
    append that returns has promised the record is durable (ingest answers 202 on it), and a directory
    fsync that failed breaks that promise, so the caller must know. chatcli logs and goes on; a
    filesystem that refuses directory fsync cannot keep that promise, and lessonboard refuses it."""
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_atomic(path: Path, data: bytes, *, mode: int) -> None:
    """Replace ``path`` with ``data``: temp file in the same directory (mode ``mode``), fsync, rename,
    fsync the directory. A crash leaves the old file or the new one, never a torn one. Renaming over a
    symlink replaces the link itself, never its target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _durable_temp(path, data, mode=mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _durable_temp(path: Path, data: bytes, *, mode: int) -> Path:
    """``data`` in a new temp file beside ``path`` (mode ``mode``), fsynced: what both atomic writes put in
    place. Nothing is left behind when writing it fails."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def create_atomic(path: Path, data: bytes, *, mode: int) -> bool:
    """Create ``path`` with ``data`` unless it exists: temp file (mode ``mode``), fsync, hard link to
    ``path`` (which fails if another process made it first), fsync the directory. True when this call
    made the file; False when it was already there, whose content is then left as it is: two processes
    racing agree on the first one's file, and no reader ever sees a torn one."""
    tmp = _durable_temp(path, data, mode=mode)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return True
