"""lessonboard's settings with ``bench_ingest_bare`` as the URL conf (the bare-append anchor next to the
app's own URLs). For ``bench_queue_ingest_http.py`` only."""

from lessonboard.settings import *  # noqa: F403

ROOT_URLCONF = "bench_ingest_bare"
