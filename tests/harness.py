"""pytest plugin loaded with ``-p tests.harness`` (see pyproject.toml), *before* Django's settings load.

It gives the test run its own data dir (``var/test`` unless LESSONBOARD_DATA_DIR is set), its own metrics
and broker folders (emptied at start), no .env, and — unless DATABASE_URL points at a real server — starts
the embedded PostgreSQL with pgvector once for the whole run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

os.environ["LESSONBOARD_ENV_FILE"] = ""
DATA_DIR = Path(os.environ.setdefault("LESSONBOARD_DATA_DIR", str(ROOT / "var" / "test"))).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)
for stale in ("metrics", "broker", "cache"):
    shutil.rmtree(DATA_DIR / stale, ignore_errors=True)
(DATA_DIR / "metrics").mkdir()
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(DATA_DIR / "metrics")
os.environ.setdefault("LESSONBOARD_NODE", "testnode")
for name in ("LESSONBOARD_LLM_BASE_URL", "LESSONBOARD_LLM_MODEL", "LESSONBOARD_LLM_API_KEY", "OPENAI_API_KEY"):
    os.environ.pop(name, None)

if not os.environ.get("DATABASE_URL"):
    from lessonboard import embedded

    embedded.start(DATA_DIR / "pgdata")
