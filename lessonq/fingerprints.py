"""Error fingerprints for DLQ triage: a dead job's last error with the parts that vary between
occurrences of the same failure (timestamps, ids, paths, quoted values, numbers) replaced by
placeholders, plus the trigger, hashed into a short group key.

The normalisation is a chain of PostgreSQL ``regexp_replace`` calls used as *generated columns* on
``Job`` (``error_signature``, ``fingerprint``): the database keeps them right on every write path
(ingest, worker, import, bulk SQL) with no hook in the queue code, and groups are one indexed GROUP BY.
The rules are PostgreSQL ARE regexes, applied in order (URLs and timestamps before bare numbers).
"""

from __future__ import annotations

from django.db.models import Case, Expression, F, Func, TextField, Value, When

SIGNATURE_LENGTH = 500

RULES: tuple[tuple[str, str], ...] = (
    (r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]+", "<url>"),
    (r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?", "<time>"),
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<uuid>"),
    (r"\m\d{1,3}(\.\d{1,3}){3}(:\d+)?\M", "<ip>"),
    (r"(~|\.{1,2})?(/[A-Za-z0-9_.@%+-]+){2,}/?", "<path>"),
    (r"[A-Za-z]:\\[^\s\"']+", "<path>"),
    (r"\"[^\"\n]*\"", '"…"'),
    (r"(^|[^[:alnum:]])'[^'\n]*'", "\\1'…'"),
    (r"\m(0x)?(?=[0-9a-fA-F]*[0-9])[0-9a-fA-F]{8,}\M", "<hex>"),
    # Numbers go, except a status right after "code"/"status"/"HTTP"/"returned" (503 and 429 are
    # different failures); the second lookbehind makes a match start at the first digit of a run.
    (
        r"(?<![Cc]ode: |[Cc]ode=|[Cc]ode |[Ss]tatus: |[Ss]tatus=|[Ss]tatus |HTTP |returned )(?<![0-9.])\d+(\.\d+)?",
        "<n>",
    ),
    (r"\s+", " "),
)


def _regexp_replace(expr: Expression | F, pattern: str, replacement: str) -> Func:
    return Func(
        expr, Value(pattern), Value(replacement), Value("g"), function="regexp_replace", output_field=TextField()
    )


def normalised(field: str = "last_error") -> Func:
    """SQL: ``field`` normalised by ``RULES``, trimmed, cut to ``SIGNATURE_LENGTH`` characters."""
    expr: Expression | F = F(field)
    for pattern, replacement in RULES:
        expr = _regexp_replace(expr, pattern, replacement)
    trimmed = Func(expr, function="btrim", output_field=TextField())
    return Func(trimmed, Value(SIGNATURE_LENGTH), function="left", output_field=TextField())


def signature_expression() -> Case:
    return _unless_empty(normalised("last_error"))


def fingerprint_expression() -> Func:
    """SQL: the first 16 hex characters of md5(trigger, newline, signature)."""
    joined = Func(
        F("trigger"),
        Value("\n"),
        _unless_empty(normalised("last_error")),
        template="(%(expressions)s)",
        arg_joiner=" || ",
    )
    digest = Func(joined, function="md5", output_field=TextField())
    return Func(digest, Value(16), function="left", output_field=TextField())


def _unless_empty(signature: Func) -> Case:
    """``''`` for an empty error without running the rules (every rule leaves ``''`` as it is, so the
    value is the same): every job is inserted with no error yet, and the 2 × 11 ``regexp_replace`` calls
    cost more than the rest of the insert (a replay adopts 100,000 rows)."""
    return Case(When(last_error="", then=Value("")), default=signature, output_field=TextField())
