"""Set-up for the queue benchmarks (``var/bench-queue``, database ``lessonboard_bench_queue``, recreated
per run). Import it before anything Django."""

from __future__ import annotations

import bench_env
from bench_env import env, percentile

bench_env.setup("queue", fresh_db=True)

__all__ = ["env", "percentile", "reset_queue"]


def reset_queue() -> None:
    from lessonq.models import Job, Outbox
    from lessons.models import Lesson

    Job.objects.all().delete()
    Outbox.objects.all().delete()
    Lesson.objects.filter(source_job_id__isnull=False).delete()
