from django.db import migrations

# Queue text search on every finished tab through an index (docs/api.md#limits): trigram GIN on the first
# 2,000 characters of task and last error (lessonq.triage.queries.SEARCH_EXCERPT_CHARS) of dead, done and
# expired jobs, in place of the Dead tab's indexes over whole payloads (a 15 MiB task made ~15M trigrams
# and a Done-tab search read every payload in full). New jobs (pending) do not enter them: ingest pays
# nothing; a job enters when it finishes.
FINISHED = "state IN ('dead', 'succeeded', 'skipped', 'purged', 'expired')"
FORWARD = f"""
DROP INDEX IF EXISTS queue_job_dead_task_trgm;
DROP INDEX IF EXISTS queue_job_dead_error_trgm;
CREATE INDEX queue_job_finished_task_trgm ON queue_job USING gin (UPPER(LEFT(task, 2000)) gin_trgm_ops)
  WHERE {FINISHED};
CREATE INDEX queue_job_finished_error_trgm ON queue_job USING gin (UPPER(LEFT(last_error, 2000)) gin_trgm_ops)
  WHERE {FINISHED};
"""
BACKWARD = """
DROP INDEX IF EXISTS queue_job_finished_task_trgm;
DROP INDEX IF EXISTS queue_job_finished_error_trgm;
CREATE INDEX queue_job_dead_task_trgm ON queue_job USING gin (UPPER(task) gin_trgm_ops) WHERE state = 'dead';
CREATE INDEX queue_job_dead_error_trgm ON queue_job USING gin (UPPER(last_error) gin_trgm_ops) WHERE state = 'dead';
"""


class Migration(migrations.Migration):
    dependencies = [
        ("queue", "0008_node_presence_scheduler"),
    ]

    operations = [migrations.RunSQL(FORWARD, reverse_sql=BACKWARD)]
