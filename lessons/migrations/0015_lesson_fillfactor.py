# Space kept free on every page of the lessons table (fillfactor 85), so the writes of reinforce-by-use
# (access_count, last_accessed, score: no index covers them) are HOT updates: the new row version stays on
# its page and no index gets an entry for it. At fillfactor 100 every retrieve's use-update inserted each
# returned lesson into every index again, the HNSW graph included: ~15 ms a lesson at 200,000 lessons
# (docs/benchmarks.md). Pages written before this keep no free space until the table is rewritten
# (`VACUUM FULL lessons_lesson`, docs/operations.md#lessons-table).
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("lessons", "0014_gap_answered_by")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE lessons_lesson SET (fillfactor = 85)",
            reverse_sql="ALTER TABLE lessons_lesson RESET (fillfactor)",
        )
    ]
