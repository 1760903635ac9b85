"""Keyset pagination on (timestamp, id), newest first: stays fast deep into a list and never skips or
repeats rows that share a timestamp (the id breaks ties). Cursors are opaque URL-safe strings."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Model, Q, QuerySet


@dataclass(frozen=True)
class Page:
    rows: list[Any]
    next_cursor: str | None


def encode_cursor(when: datetime, pk: Any) -> str:
    return base64.urlsafe_b64encode(f"{when.isoformat()}|{pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int] | None:
    """``None`` for a cursor that does not decode to what ``encode_cursor`` writes — a time-zone-aware
    timestamp and an integer id (a hand-edited URL starts from the top; the API answers 400)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        text, pk = raw.rsplit("|", 1)
        when = datetime.fromisoformat(text)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if when.utcoffset() is None or not pk.isascii() or not pk.isdigit() or len(pk) > 19:
        return None
    return when, int(pk)


def keyset_page(qs: QuerySet[Any], *, cursor: str | None, size: int, time_field: str, pk_field: str = "pk") -> Page:
    """One page of ``qs`` ordered by ``time_field`` desc, ``pk_field`` desc, after ``cursor``."""
    qs = qs.order_by(f"-{time_field}", f"-{pk_field}")
    position = decode_cursor(cursor) if cursor else None
    if position is not None:
        when, pk = position
        qs = qs.filter(Q(**{f"{time_field}__lt": when}) | Q(**{time_field: when, f"{pk_field}__lt": pk}))
    rows = list(qs[: size + 1])
    next_cursor = None
    if len(rows) > size:
        rows = rows[:size]
        last: Model = rows[-1]
        key = pk_field if pk_field != "pk" else last._meta.pk.attname  # type: ignore[union-attr]
        next_cursor = encode_cursor(getattr(last, time_field), getattr(last, key))
    return Page(rows=rows, next_cursor=next_cursor)
