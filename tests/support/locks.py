"""A row lock held by another connection, as a worker in the middle of a step holds it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction

from lessonq.models import Job


@contextmanager
def job_row_locked(job_id: str) -> Iterator[None]:
    """``SELECT … FOR UPDATE`` on this job's row, from a thread with its own connection, until the block
    ends. Needs committed rows: ``django_db(transaction=True)``."""
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=job_id)
                locked.set()
                release.wait(60)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10), f"the lock on job {job_id} was not taken"
        yield
    finally:
        release.set()
        holder.join()
