"""Go ``encoding/json`` and ``time.RFC3339Nano`` compatibility: what chatcli writes into its WAL records.

Byte-identical output matters because the record's CRC covers it (docs/compat/chatcli.md#wal-envelope, docs/compat/chatcli.md#go-json).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
_SURROGATE = re.compile("[\ud800-\udfff]")
_GO_EXTRA_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def dumps(value: Any) -> str:
    """Compact JSON as Go's ``json.Marshal`` writes it (keys in the given order)."""
    text = json.dumps(_sanitize(value), ensure_ascii=False, separators=(",", ":"))
    # Python escapes ", \\, \n, \r, \t, \b, \f and other C0 controls as \u00XX exactly like Go ≥ 1.22;
    # Go additionally HTML-escapes <, >, & and escapes the JavaScript line terminators.
    # One str.replace per character (each a C loop) rather than str.translate with a mapping, which walks
    # the text a character at a time in Python's slow path: 1.5 s for a 16 MiB record against ~50 ms.
    for char, escape in _GO_EXTRA_ESCAPES:
        if char in text:
            text = text.replace(char, escape)
    return text


def _sanitize(value: Any) -> Any:
    # Go replaces invalid UTF-8 with U+FFFD; in Python that is a lone surrogate (e.g. from "\ud800" in JSON).
    if isinstance(value, str):
        try:
            value.encode("utf-8")  # a C-speed check: only a lone surrogate makes it fail
        except UnicodeEncodeError:
            return _SURROGATE.sub("\ufffd", value)
        return value
    if isinstance(value, dict):
        return {k: _sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sanitize(v) for v in value]
    return value


def format_time(value: datetime | None) -> str:
    """Go's RFC3339Nano in the value's own offset (``Z`` when it is zero); ``None`` → Go's zero time.

    Like a Go ``time.Time``, a value carries its zone: new records are written with process-local times
    (``local()``), and a record read back keeps the offsets it was written with, so it re-encodes
    byte-identically. A naive value is taken as local time."""
    if value is None or value == GO_ZERO_TIME:
        return "0001-01-01T00:00:00Z"
    local = value if value.tzinfo is not None else value.astimezone()
    text = f"{local.year:04d}-{local.month:02d}-{local.day:02d}T{local.hour:02d}:{local.minute:02d}:{local.second:02d}"
    if local.microsecond:
        text += ("." + f"{local.microsecond:06d}").rstrip("0")
    offset = local.utcoffset() or timedelta(0)
    if offset == timedelta(0):
        return text + "Z"
    sign = "+" if offset > timedelta(0) else "-"
    minutes = abs(int(offset.total_seconds())) // 60
    return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


# What Go writes: ``YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM)`` with ASCII digits and upper-case ``T``/``Z``.
# Python's parser (3.11+) reads this shape exactly; one compiled match decides, much cheaper than
# checking it piece by piece in Python (replay parses two times per record).
_GO_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)", re.ASCII)


def parse_time(text: str) -> datetime:
    """RFC 3339 with any fractional precision (sub-microsecond digits are truncated)."""
    if _GO_RFC3339.fullmatch(text):
        return datetime.fromisoformat(text)
    # Anything else (lower-case ``t``/``z``) takes the general rules, or is refused.
    m = _RFC3339.match(text)
    if not m:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    if m.group(8):
        tz = UTC
    else:
        delta = timedelta(hours=int(m.group(10)), minutes=int(m.group(11)))
        tz = timezone(-delta if m.group(9) == "-" else delta)
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)


def local(value: datetime) -> datetime:
    """``value`` in the process-local zone (Go's ``time.Local``), as chatcli stamps its records."""
    return value.astimezone()
