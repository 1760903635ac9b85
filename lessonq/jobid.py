"""chatcli's JobID (docs/compat/chatcli.md#jobid): the content-addressed idempotency key of a lesson job.

``lowercase hex of the first 8 bytes of SHA-256("task:<t>\\0trigger:<g>\\0attempt:<a>\\0outcome:<o>")``,
with Go's definitions of whitespace (``unicode.IsSpace``) and lower-casing (per-rune simple mapping),
so the same request gets the same id here and in chatcli.

Per workspace (docs/queue.md#dedupe-per-workspace): a job reported in a workspace appends
``"\\0workspace:<slug>"`` to that message, so the same failure in two workspaces is two jobs. Without a
workspace the id is exactly chatcli's; with one it is still 16 lowercase hex digits, so the WAL file name
and record stay chatcli's format byte for byte (``chatcli_job_id`` of a job gives chatcli's own id back).
"""

from __future__ import annotations

import hashlib
import re

# Go's unicode.IsSpace: Latin-1 \t \n \v \f \r, space, U+0085, U+00A0, plus the Unicode White_Space
# characters above Latin-1. Python's str.isspace() additionally counts \x1c–\x1f, which Go does not.
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
_SPACE_RUN = re.compile(f"[{re.escape(GO_SPACE)}]+")
JOB_ID_RE = re.compile(r"^[0-9a-f]{16}$")
_SURROGATE = re.compile("[\ud800-\udfff]")

# The only character whose full lowercase mapping is not one code point; Go's simple mapping gives "i".
_SPECIAL_LOWER = {"\u0130": "i"}


def go_trim(text: str) -> str:
    """``strings.TrimSpace``."""
    return text.strip(GO_SPACE)


def go_lower(text: str) -> str:
    """``strings.ToLower``: per-rune simple mapping (no final-sigma context, ``İ`` → ``i``)."""
    if text.isascii():
        return text.lower()
    out = []
    for ch in text:
        low = _SPECIAL_LOWER.get(ch) or ch.lower()
        out.append(low if len(low) == 1 else ch)
    return "".join(out)


def normalize_task(task: str) -> str:
    """Lower-case, trim, collapse every internal whitespace run to one ASCII space."""
    return _SPACE_RUN.sub(" ", go_trim(go_lower(task)))


def job_id(*, task: str, attempt: str, outcome: str, trigger: str, workspace: str = "") -> str:
    """chatcli's JobID; with ``workspace`` (a slug) the dedupe key of that workspace's job."""
    parts = [
        "task:" + normalize_task(task),
        "trigger:" + go_lower(go_trim(trigger)),
        "attempt:" + go_trim(attempt),
        "outcome:" + go_trim(outcome),
    ]
    if workspace:
        parts.append("workspace:" + workspace)
    message = "\x00".join(parts)
    # Go's JSON decoder turns a lone surrogate escape into U+FFFD before chatcli ever hashes the text.
    return hashlib.sha256(_SURROGATE.sub("\ufffd", message).encode("utf-8")).digest()[:8].hex()


def is_job_id(value: str) -> bool:
    return bool(JOB_ID_RE.match(value))
