"""Fault injection for crash tests: ``LESSONQ_FAULT=<point>`` makes the process die (``os._exit(137)``,
as a ``kill -9`` would) when it reaches that named point of an effect order (docs/architecture.md#crash-points).

Points: ``wal.append.after_tmp``, ``ingest.after_wal``, ``ingest.after_row``, ``success.after_commit``, ``skipped.after_row``,
``transient.after_wal``, ``transient.after_row``, ``dead.after_dlq``, ``dead.after_row``,
``retry.after_wal``, ``retry.after_row``, ``process.after_claim``, ``failover.after_wal``, ``failover.after_commit``,
``outbox.before_send`` (the node's dispatcher, after the job was accepted).
``LESSONQ_FAULT_ONCE=<path>``: only fire if that file does not exist yet (it is created first), so a
restarted worker gets past the point.
"""

from __future__ import annotations

import os


def point(name: str) -> None:
    if os.environ.get("LESSONQ_FAULT") != name:
        return
    once = os.environ.get("LESSONQ_FAULT_ONCE")
    if once:
        try:
            fd = os.open(once, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return
        os.close(fd)
    os._exit(137)
