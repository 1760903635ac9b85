"""pytest plugin loaded with ``-p tests.harness`` (see pyproject.toml), *before* Django's settings load.

It gives the test run its own data dir (``var/test`` unless LESSONBOARD_DATA_DIR is set), its own metrics
and broker folders (emptied at start), no .env, and — unless DATABASE_URL points at a real server — starts
the embedded PostgreSQL with pgvector once for the whole run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

os.environ["LESSONBOARD_ENV_FILE"] = ""
DATA_DIR = Path(os.environ.setdefault("LESSONBOARD_DATA_DIR", str(ROOT / "var" / "test"))).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)
# One test run per data dir: a second one would empty the first's metrics and broker folders and fight
# over its test database. Held for the life of this process.
_LOCK = (DATA_DIR / ".test-run.lock").open("w")
try:
    fcntl.flock(_LOCK, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    raise SystemExit(
        f"another test run is using {DATA_DIR}; wait for it, or give this one its own LESSONBOARD_DATA_DIR"
    ) from None
for stale in ("metrics", "broker", "cache"):
    shutil.rmtree(DATA_DIR / stale, ignore_errors=True)
(DATA_DIR / "metrics").mkdir()
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(DATA_DIR / "metrics")
os.environ.setdefault("LESSONBOARD_NODE", "testnode")
# Tests start and stop many short-lived nodes; only the failover tests let a worker adopt the jobs of a
# node whose lease ran out (tests/lessonq/test_failover.py turns it on for its own workers).
os.environ.setdefault("LESSONQ_FAILOVER", "false")
# Scrapes from loopback (the test client, gunicorn under test) are allowed, as a Prometheus on the same
# host would be; tests/lessonboard/test_security.py checks the token and the deny path.
os.environ.setdefault("LESSONBOARD_METRICS_ALLOWED_ADDRESSES", "127.0.0.1,::1")
for name in ("LESSONBOARD_LLM_BASE_URL", "LESSONBOARD_LLM_MODEL", "LESSONBOARD_LLM_API_KEY", "OPENAI_API_KEY"):
    os.environ.pop(name, None)

if not os.environ.get("DATABASE_URL"):
    from lessonboard import embedded

    embedded.start(DATA_DIR / "pgdata")
