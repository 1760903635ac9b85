"""Set-up for the triage benchmarks (``var/bench-triage``, database ``lessonboard_bench_triage``).
Import it before anything Django."""

from __future__ import annotations

import bench_env
from bench_env import env, percentile

bench_env.setup("triage", LESSONBOARD_ALLOWED_HOSTS="testserver,localhost")

__all__ = ["env", "percentile"]
