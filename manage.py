#!/usr/bin/env python
"""Django's command-line utility for lessonboard."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lessonboard.settings")
    from django.conf import settings

    from lessonboard import datadir

    # The data dir's folders and secret key (importing the settings makes none); also made by Django's start
    # in any other process (gunicorn, Celery), and doing it here first names LESSONBOARD_DATA_DIR when the
    # folder cannot be made, before the embedded PostgreSQL below tries to.
    datadir.prepare()

    # With no DATABASE_URL the embedded PostgreSQL is the database: attach to it (starting it if it is
    # not running) for any command but `serve`, which manages its whole lifecycle itself.
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if settings.EMBEDDED_DATABASE and command not in {"serve", "help", "--help", "-h", "version", ""}:
        from lessonboard import embedded

        embedded.start(settings.EMBEDDED_PGDATA)
        embedded.ensure_database(settings.EMBEDDED_PGDATA, str(settings.DATABASES["default"]["NAME"]))
        settings.DATABASES["default"]["HOST"] = str(embedded.socket_dir(settings.EMBEDDED_PGDATA))

    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
