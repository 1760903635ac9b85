# The identifier-aware full-text column (docs/lessons.md#full-text): one tsvector per lesson holding its
# words stemmed by its language's configuration, the same words unstemmed ('simple'), and every code-like
# token (dotted/slashed paths, snake/camel names, error codes, flags, config keys) whole, by segment and in
# parts. ``lesson_code_terms`` is the extraction (retrieval applies it to the task too, so both sides agree);
# ``lesson_term_vector`` builds the column. The GIN index leads with the workspace (btree_gin), so a
# workspace's search is answered inside the index scan instead of filtering a table-wide match.

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.contrib.postgres.operations import BtreeGinExtension
from django.db import migrations, models

CODE_TERMS = r"""
CREATE OR REPLACE FUNCTION lesson_code_terms(doc text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
SELECT coalesce(array_agg(DISTINCT p.term), '{}'::text[])
FROM regexp_matches(doc, '([A-Za-z0-9][A-Za-z0-9_.:/=@+-]*[A-Za-z0-9_])', 'g') AS m(tok)
CROSS JOIN LATERAL (
    SELECT lower(m.tok[1]) AS term
    UNION SELECT lower(s) FROM regexp_split_to_table(m.tok[1], '[./:=@+]+') AS s
    UNION SELECT lower(a) FROM regexp_split_to_table(
        regexp_replace(regexp_replace(m.tok[1], '([a-z0-9])([A-Z])', '\1 \2', 'g'), '([A-Z])([A-Z][a-z])', '\1 \2', 'g'),
        '[^A-Za-z0-9]+') AS a
) AS p
WHERE (m.tok[1] ~ '[_.:/=@+-]' OR m.tok[1] ~ '[a-z][A-Z]' OR (m.tok[1] ~ '[0-9]' AND m.tok[1] ~ '[A-Za-z]'))
  AND length(p.term) >= 2
$fn$;

CREATE OR REPLACE FUNCTION lesson_term_vector(
    lang text, situation text, mistake text, correction text, trig text, tags text[]
) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
SELECT to_tsvector(CASE lang WHEN 'en' THEN 'english'::regconfig WHEN 'pt' THEN 'portuguese'::regconfig
                             ELSE 'simple'::regconfig END, d.doc)
       || to_tsvector('simple'::regconfig, d.doc)
       || array_to_tsvector(lesson_code_terms(d.doc))
FROM (SELECT concat_ws(' ', situation, mistake, correction, trig, array_to_string(tags, ' ')) AS doc) AS d
$fn$;
"""

DROP = "DROP FUNCTION IF EXISTS lesson_term_vector(text, text, text, text, text, text[]); DROP FUNCTION IF EXISTS lesson_code_terms(text);"


class Migration(migrations.Migration):
    dependencies = [("lessons", "0009_integrity")]

    operations = [
        BtreeGinExtension(),
        migrations.RunSQL(CODE_TERMS, DROP),
        migrations.AddField(
            model_name="lesson",
            name="term_vector",
            field=models.GeneratedField(
                db_persist=True,
                expression=models.Func(
                    models.F("lang"),
                    models.F("situation"),
                    models.F("mistake"),
                    models.F("correction"),
                    models.F("trigger"),
                    models.F("tags"),
                    function="lesson_term_vector",
                ),
                output_field=django.contrib.postgres.search.SearchVectorField(),
            ),
        ),
        migrations.AddIndex(
            model_name="lesson",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["workspace", "term_vector"], name="lesson_terms_ws_gin"
            ),
        ),
    ]
