"""gunicorn settings used by ``manage.py serve`` (and usable in production with ``-c``)."""

from __future__ import annotations

import os
from typing import Any


def child_exit(server: Any, worker: Any) -> None:
    # prometheus_client multiprocess mode: a dead web worker's live gauges must not linger.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


accesslog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
graceful_timeout = 30
timeout = 60
