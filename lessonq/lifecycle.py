"""Worker lifecycle: replay at start; a bounded graceful drain at stop (docs/compat/chatcli.md#lifecycle, docs/compat/chatcli.md#drain)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

from django.conf import settings

log = logging.getLogger(__name__)


def replay_at_start(*, consumes: bool) -> None:
    """Replay this node's WAL (in a thread, as chatcli runs Replay asynchronously after Start)."""
    if not consumes:
        return

    def run() -> None:
        from django.db import close_old_connections

        from lessonq.reconcile import replay

        try:
            report = replay()
            log.info("lessonq: replay at worker start: %s", report.as_dict())
        except Exception:
            log.exception("lessonq: replay at worker start failed; the sweeper will retry")
        finally:
            close_old_connections()

    threading.Thread(target=run, name="lessonq-replay", daemon=True).start()


_node_threads: dict[str, threading.Thread] = {}


def start_once(name: str, make: Callable[[], threading.Thread]) -> None:
    """Start the node's thread ``name`` (the lease keeper, the outbox dispatcher) in the lesson worker's
    main process, unless it runs already: the worker-ready hook may fire again."""
    running = _node_threads.get(name)
    if running is None or not running.is_alive():
        _node_threads[name] = thread = make()
        thread.start()


def bound_drain(how: str) -> None:
    """SIGTERM starts Celery's warm shutdown: no new jobs are taken and in-flight ones may finish. If they
    have not finished within LESSONQ_DRAIN_TIMEOUT, escalate to a cold shutdown: the children are stopped,
    their jobs stay in the WAL (and their rows ``running`` with a dead claim), and the next worker reclaims
    them, counting the interrupted attempt, as chatcli counts a cancelled job as a transient attempt."""
    if how != "Warm":
        return
    timeout = settings.LESSONQ_DRAIN_TIMEOUT
    pid = os.getpid()

    def escalate() -> None:
        log.warning("lessonq: drain timeout (%ss) reached; cancelling in-flight jobs", timeout)
        os.kill(pid, signal.SIGQUIT)

    timer = threading.Timer(timeout, escalate)
    timer.daemon = True
    timer.start()
