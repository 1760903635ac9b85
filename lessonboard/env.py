"""Small typed readers for settings that come from the environment.

Every reader raises ``ImproperlyConfigured`` naming the variable when its value cannot be used, so a
typo stops start-up with a message instead of running with a surprise. Unlike chatcli (which silently
keeps the default on a bad value, docs/compat/chatcli.md#configuration), lessonboard refuses to start.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

TRUE = {"1", "true", "yes", "on", "y", "t"}
FALSE = {"0", "false", "no", "off", "n", "f"}

_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class Env:
    """Reads variables from a mapping (``os.environ`` by default)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ

    def _raw(self, name: str) -> str | None:
        value = self.environ.get(name)
        if value is None:
            return None
        value = value.strip()
        return value if value != "" else None

    def text(self, name: str, default: str = "") -> str:
        raw = self._raw(name)
        return default if raw is None else raw

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.text(name, default).lower()
        if value not in choices:
            raise ImproperlyConfigured(f"{name}={value!r} is not one of: {', '.join(choices)}")
        return value

    def flag(self, name: str, default: bool) -> bool:
        raw = self._raw(name)
        if raw is None:
            return default
        if raw.lower() in TRUE:
            return True
        if raw.lower() in FALSE:
            return False
        raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use one of 1/0, true/false, yes/no, on/off)")

    def integer(self, name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
        raw = self._raw(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
        self._check_range(name, value, minimum, maximum)
        return value

    def number(self, name: str, default: float, *, minimum: float | None = None, maximum: float | None = None) -> float:
        raw = self._raw(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
        if value != value:  # NaN
            raise ImproperlyConfigured(f"{name}={raw!r} is not a number")
        self._check_range(name, value, minimum, maximum)
        return value

    def duration(self, name: str, default: float, *, minimum: float | None = None) -> float:
        """Seconds, from Go duration syntax as chatcli takes it (``300ms``, ``5s``, ``2h30m``) or a bare
        number of seconds."""
        raw = self._raw(name)
        if raw is None:
            return default
        value = parse_duration(raw)
        if value is None:
            raise ImproperlyConfigured(f"{name}={raw!r} is not a duration (examples: 300ms, 5s, 2m, 168h)")
        self._check_range(name, value, minimum, None)
        return value

    def items(self, name: str, default: list[str] | tuple[str, ...], *, lower: bool = True) -> list[str]:
        """Comma-separated, trimmed, empties dropped (lowercased unless told otherwise), as chatcli."""
        raw = self._raw(name)
        if raw is None:
            return list(default)
        items = [part.strip() for part in raw.split(",")]
        return [item.lower() if lower else item for item in items if item]

    def path(self, name: str, default: Path, *, base: Path | None = None) -> Path:
        raw = self._raw(name)
        path = Path(raw).expanduser() if raw is not None else default
        if not path.is_absolute() and base is not None:
            path = base / path
        return path

    @staticmethod
    def _check_range(name: str, value: float, minimum: float | None, maximum: float | None) -> None:
        if minimum is not None and value < minimum:
            raise ImproperlyConfigured(f"{name}={value} is below the minimum {minimum}")
        if maximum is not None and value > maximum:
            raise ImproperlyConfigured(f"{name}={value} is above the maximum {maximum}")


def parse_duration(text: str) -> float | None:
    """Go's ``time.ParseDuration`` for non-negative values; a plain number means seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    if not text:
        return None
    pos, total = 0, 0.0
    for match in _GO_DURATION.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and pos > 0 else None


def database_from_url(url: str, *, name: str = "DATABASE_URL") -> dict[str, object]:
    """A Django DATABASES entry from ``postgres://user:pass@host:port/db?host=/socket/dir``."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(f"{name} must be a postgresql:// URL (PostgreSQL ≥ 15 with pgvector and pg_trgm)")
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    host = query.pop("host", None) or unquote(parts.hostname or "")
    db_name = unquote(parts.path.lstrip("/"))
    if not db_name:
        raise ImproperlyConfigured(f"{name} names no database (postgresql://user@host:5432/DBNAME)")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": db_name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(parts.port or ""),
        "OPTIONS": query,
    }
