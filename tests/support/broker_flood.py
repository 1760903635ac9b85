"""A task for broker floods: it records its number, one line per run, in ``$LB_FLOOD_OUT/<pid>.ids``.

Loaded into a real worker with ``--include tests.support.broker_flood``."""

from __future__ import annotations

import os
from pathlib import Path

from celery import shared_task


@shared_task(name="tests.flood.record")
def record(number: int) -> None:
    path = Path(os.environ["LB_FLOOD_OUT"]) / f"{os.getpid()}.ids"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{number}\n".encode())
    finally:
        os.close(fd)


def recorded(out: Path) -> list[int]:
    return [int(line) for path in out.glob("*.ids") for line in path.read_text().split()]


def publish(numbers: range) -> None:
    """Run in a producer process: publish ``numbers`` as fast as one connection allows."""
    import django

    django.setup()
    from lessonboard.celery import app

    with app.connection_for_write() as conn, app.amqp.Producer(conn) as producer:
        for number in numbers:
            record.apply_async(args=[number], producer=producer, queue="default")
