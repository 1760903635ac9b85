"""gunicorn settings used by ``manage.py serve`` (and usable in production with ``-c``)."""

from __future__ import annotations

import os
from typing import Any

from lessonboard.config import Reader

# The same declarations settings.py reads (lessonboard/config.py): one default and one bound per variable.
cfg = Reader()


def child_exit(server: Any, worker: Any) -> None:
    # prometheus_client multiprocess mode: a dead web worker's live gauges must not linger.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def post_worker_init(worker: Any) -> None:
    # What the apps start in every web worker, e.g. the node's web saying it is alive in the node's lease row
    # (lessonq.presence, docs/operations.md#nodes). The application is loaded by now, so the apps are ready.
    from lessonboard.lifecycle import WEB_WORKER_STARTED

    for hook in WEB_WORKER_STARTED:
        hook()


# gthread: each worker process serves LESSONBOARD_WEB_THREADS requests at once, so a slow request (a
# refine wait, a big page) holds one thread, not the process: /healthz and pages stay fast beside it
# (bench/bench_web_under_load.py). Each thread keeps its own database connection.
worker_class = "gthread"
threads = cfg("LESSONBOARD_WEB_THREADS")
# Recycling (docs/operations.md#memory): a worker is replaced after about this many requests (each worker
# its own number, up to the jitter more, so they never restart together), which bounds what any growth of
# a long-lived process can reach (15 MiB trigger bodies fragment the allocator's heap). 0 = never.
max_requests = cfg("LESSONBOARD_WEB_MAX_REQUESTS")
max_requests_jitter = cfg("LESSONBOARD_WEB_MAX_REQUESTS_JITTER")

accesslog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
graceful_timeout = 30
timeout = 60
