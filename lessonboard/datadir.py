"""What the data directory must hold before lessonboard runs: its folders and the generated secret key.

Importing ``lessonboard.settings`` touches no disk (a test imports it against a data dir that does not
exist and finds it still absent). :func:`prepare` makes what is missing; it runs once per process when
Django starts (``LessonboardConfig.import_models``, before any app's models are imported: prometheus_client
opens its multiprocess files as soon as a metric is defined), so every ``manage.py`` command, ``serve``,
each gunicorn and Celery process and the test harness find the folders there.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from lessonboard import files

SECRET_KEY_MODE = 0o600


def folders() -> list[tuple[Path, int]]:
    """(folder, mode) for every folder the settings name that lessonboard itself writes to."""
    out = [(Path(settings.DATA_DIR), 0o777), (Path(settings.STATIC_ROOT), 0o777)]
    out.append((Path(settings.PROMETHEUS_MULTIPROC_DIR), 0o777))
    if settings.EMBEDDED_BROKER:
        out += [(Path(settings.BROKER_DIR) / sub, 0o777) for sub in ("queue", "control")]
    base = Path(settings.LESSONQ_BASE_DIR)
    out += [(base / sub, 0o750) for sub in ("wal", "dlq", "quarantine", "expired")]
    return out


def prepare() -> None:
    """Make the data dir's folders and, when no ``LESSONBOARD_SECRET_KEY`` is set, the secret key file."""
    data_dir = Path(settings.DATA_DIR)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(f"LESSONBOARD_DATA_DIR={data_dir} cannot be created: {exc}") from exc
    for folder, mode in folders():
        folder.mkdir(mode=mode, parents=True, exist_ok=True)
    try:
        settings.SECRET_KEY  # noqa: B018 - Django refuses an empty one here
    except ImproperlyConfigured:
        settings.SECRET_KEY = secret_key(Path(settings.SECRET_KEY_FILE))


def secret_key(path: Path) -> str:
    """The key in ``path``, made (random, mode 0600, atomic and fsynced) if there is none yet; two
    processes starting together keep the one that was written first."""
    files.create_atomic(path, (secrets.token_urlsafe(50) + "\n").encode(), mode=SECRET_KEY_MODE)
    return read_secret_key(path)


def read_secret_key(path: Path) -> str:
    """The key kept in ``path``; empty when there is no file (yet)."""
    try:
        return path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):  # none yet (or no data dir: prepare() says so)
        return ""
