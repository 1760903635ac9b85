"""Indexes on ``updated_at`` and ``embedded_at``: beat's gap refresh reads the newest of each on every tick
and the lessons changed since its last run (``lessons.usage.gaps``), a scan of the whole table each time
without them. Built concurrently (no lock on writes while a big table is indexed), so not in a transaction.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("lessonboard", "0009_queue_depth_sample"),
        ("lessons", "0017_move_version"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="lesson",
            index=models.Index(fields=["updated_at"], name="lesson_updated_idx"),
        ),
        AddIndexConcurrently(
            model_name="lesson",
            index=models.Index(fields=["embedded_at"], name="lesson_embedded_idx"),
        ),
    ]
