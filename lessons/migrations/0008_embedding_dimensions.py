"""The default local model became ``use`` (512 dimensions; it was e5, 384): a column whose size is not
``LESSONBOARD_EMBEDDING_DIMENSIONS`` is resized here, as ``manage.py lessons reembed --resize`` would —
its vectors came from another model, which the new one's queries cannot use (and a query of another size
makes pgvector refuse the search). The ``embed_missing`` sweep (or ``lessons reembed``) fills the column
again. A deployment that names its model and size in the environment keeps its column and vectors."""

from django.conf import settings
from django.db import migrations


def resize_to_the_setting(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass('lessons_lesson') AND attname = 'embedding'"
        )
        row = cursor.fetchone()
    if row and row[0] > 0 and row[0] != settings.EMBEDDING_DIMENSIONS:
        from lessons.vectors import resize_column

        resize_column(settings.EMBEDDING_DIMENSIONS)


class Migration(migrations.Migration):
    dependencies = [("lessons", "0007_usage")]

    operations = [migrations.RunPython(resize_to_the_setting, migrations.RunPython.noop)]
