"""The node's dispatcher: sends the messages that ingests owe (rows of ``queue_outbox``), many over one
broker connection, from a thread of the node's lesson worker.

The ingest statement (``lessonq.ingest.INSERT_ROW_SQL``) writes an admitted job's row and its outbox
entry in one transaction, so the web process does no broker work: a Celery publish (building the
message, a file written and renamed by the embedded broker) costs as much CPU as the WAL append, and in
the web process it competed for the GIL with the requests (bench/bench_queue_ingest_http.py).

Each batch is claimed (``FOR UPDATE SKIP LOCKED``: several workers of one node never send the same
entry), sent, and its entries deleted in one transaction. A crash before the commit leaves the entries,
so the next dispatcher sends them again: a message may go twice, never zero times, and the worker's
claim makes a second message for a job harmless. A job whose entry is lost with an uncommitted row (the
ingest commits without waiting for PostgreSQL's flush) is adopted again by replay, and a dispatched job
whose message went missing on the broker is re-published by the sweeper, as before.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import connection, transaction

from lessonq import faults
from lessonq.dispatch import send_batch

log = logging.getLogger(__name__)

BATCH = 200  # messages per claim, transaction and producer checkout
IDLE_WAIT = 0.05  # seconds between looks at an outbox that had less than a full batch
ERROR_WAIT_MAX = 5.0  # the wait after a failure doubles up to this

CLAIM_SQL = "SELECT job_id FROM queue_outbox WHERE node = %s ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED"
DELETE_SQL = "DELETE FROM queue_outbox WHERE job_id = ANY(%s)"


def drain_once(limit: int = BATCH) -> int:
    """Send up to ``limit`` of this node's owed messages, oldest first, and delete their entries; how
    many were sent. A broker or database error propagates and leaves the entries for the next try."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(CLAIM_SQL, [settings.LESSONQ_QUEUE, limit])
        ids = [str(row[0]) for row in cursor.fetchall()]
        if not ids:
            return 0
        faults.point("outbox.before_send")
        send_batch([(job_id, 0.0) for job_id in ids])
        cursor.execute(DELETE_SQL, [ids])
    return len(ids)


def drain() -> int:
    """Send everything this node owes now (a test, a command, the bench); how many."""
    sent = total = drain_once()
    while sent:
        sent = drain_once()
        total += sent
    return total


class Dispatcher(threading.Thread):
    """The loop: a full batch is followed by the next at once, a partial or empty one by ``IDLE_WAIT``
    (so a trickle still goes out in batches), a failure by a doubling wait."""

    def __init__(self) -> None:
        super().__init__(name="lessonq-outbox", daemon=True)
        self.stopping = threading.Event()

    def run(self) -> None:
        failures = 0
        while not self.stopping.is_set():
            try:
                sent = drain_once()
                failures = 0
            except Exception as exc:
                failures += 1
                log.warning("lessonq: sending owed messages failed (retrying): %s", exc)
                connection.close_if_unusable_or_obsolete()
                # The exponent stops growing once the wait is at its cap: 2.0**1024 overflows a float, and the
                # thread would die after ~85 minutes of an outage, leaving the sweeper's re-publish alone.
                self.stopping.wait(min(IDLE_WAIT * 2 ** min(failures, 32), ERROR_WAIT_MAX))
                continue
            if sent < BATCH:
                self.stopping.wait(IDLE_WAIT)
