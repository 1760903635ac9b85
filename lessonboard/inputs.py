"""What lessonboard accepts from clients: one policy for NUL, lone surrogates, nesting and numbers
(docs/api.md#input-policy).

- Text that goes into the WAL (a trigger's task, output, error and metadata, chatcli's raw
  ``LessonRequest``, records adopted by ``lessonq import``) is accepted as chatcli accepts it: the WAL keeps
  the exact text and the JobID is computed from it; the database row stores ``storable(text)`` — NUL and
  lone surrogates replaced by U+FFFD, visibly — because PostgreSQL text cannot hold them.
- Anywhere else (other API fields, query strings, form fields, URL paths) a NUL or a lone surrogate is a
  400 naming the field, before anything is done.
- JSON bodies: nesting deeper than ``MAX_DEPTH``, ``NaN``/``Infinity`` and numbers that overflow a float
  are a 400 naming the body; integers longer than Python's digit limit too.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 32
REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class BadInput(ValueError):
    """A client value lessonboard refuses: ``field`` names where it was (``a.b[2]`` for JSON)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def storable(text: str) -> str:
    """``text`` as the database can store it: NUL and lone surrogates become U+FFFD."""
    if text.isascii() and "\x00" not in text:  # nearly every text; a replay stores 5 a record
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text)


def unstorable_reason(text: str) -> str | None:
    """Why ``text`` cannot be accepted as it is (``None`` when it can)."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    return "contains a NUL character" if found.group() == "\x00" else "contains a lone surrogate (invalid Unicode)"


def check_text(field: str, text: str) -> str:
    reason = unstorable_reason(text)
    if reason is not None:
        raise BadInput(field, f"'{field}' {reason}")
    return text


def _reject_constant(name: str) -> Any:
    raise BadInput("body", f"body contains {name}, which is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise BadInput("body", f"body contains a number too large for a float ({text[:40]})")
    return value


def parse_json(raw: bytes | str, *, keep_text: bool = False) -> Any:
    """Decode a client's JSON document by the policy above; ``BadInput`` says what is wrong.

    ``keep_text`` leaves NUL and lone surrogates in strings for the caller to handle (WAL-bound text)."""
    try:
        data = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError as exc:
        raise BadInput("body", f"body is nested deeper than {MAX_DEPTH} levels") from exc
    except BadInput:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput("body", f"body is not valid JSON: {exc}") from exc
    check_document(data, keep_text=keep_text)
    return data


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _path(parent: str, key: str | int) -> str:
    """``a.b`` and ``a[0]``; a key that is data rather than a name (a file path, a sentence) names its
    parent instead, so ``field`` stays a field."""
    if isinstance(key, int):
        return f"{parent}[{key}]" if parent else f"[{key}]"
    if not _NAME.match(key):
        return parent
    return f"{parent}.{key}" if parent else key


def check_document(data: Any, *, keep_text: bool = False) -> None:
    """Walk a decoded document without recursion: depth, and (unless ``keep_text``) unstorable text."""
    stack: list[tuple[str, Any, int]] = [("", data, 0)]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth >= MAX_DEPTH:
                raise BadInput("body", f"body is nested deeper than {MAX_DEPTH} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and not keep_text:
                    reason = unstorable_reason(key)
                    if reason is not None:
                        raise BadInput(path or "body", f"a key of '{path or 'body'}' {reason}")
                stack.append((_path(path, key), item, depth + 1))
        elif isinstance(value, str) and not keep_text:
            check_text(path or "body", value)


def storable_document(data: Any) -> Any:
    """A decoded JSON document from a model or a chatcli file, as the database can store it: every string (keys too) through
    ``storable``. Call ``check_document`` first: this walk recurses."""
    if isinstance(data, str):
        return storable(data)
    if isinstance(data, list):
        return [storable_document(item) for item in data]
    if isinstance(data, dict):
        return {storable(str(key)): storable_document(value) for key, value in data.items()}
    return data
