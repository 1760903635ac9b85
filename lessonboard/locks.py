"""PostgreSQL session advisory locks: one holder at a time across every process of every node, and a holder
that dies lets go with its connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def alone(*key: int) -> Iterator[bool]:
    """Whether this process holds the lock ``key`` (one bigint, or two ints) for the block, taken without
    waiting: ``False`` when another holds it. Released at the end of the block, or with the connection."""
    placeholders = ", ".join(["%s"] * len(key))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT pg_try_advisory_lock({placeholders})", list(key))
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT pg_advisory_unlock({placeholders})", list(key))
