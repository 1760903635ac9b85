"""Hooks the apps add to from ``AppConfig.ready()`` for moments the foundation owns but does not act on
itself (it imports no app): a gunicorn worker that has loaded the application."""

from __future__ import annotations

from collections.abc import Callable

# Called by lessonboard.gunicorn_conf's post_worker_init, in each web worker, once the app is loaded.
WEB_WORKER_STARTED: list[Callable[[], None]] = []
