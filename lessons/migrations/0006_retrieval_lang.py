# Language-aware full text: a `lang` field (detected for the lessons already stored) and a search vector
# stemmed with the configuration of each lesson's language (docs/lessons.md#language). PostgreSQL cannot
# change a generated column's expression, so the column and its GIN index are dropped and re-added.

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models


def detect_languages(apps, schema_editor):
    from lessons.language import detect

    Lesson = apps.get_model("lessons", "Lesson")
    found: dict[str, list[int]] = {}
    rows = Lesson.objects.order_by("pk").values_list("pk", "situation", "mistake", "correction")
    for pk, situation, mistake, correction in rows.iterator(chunk_size=5000):
        found.setdefault(detect(f"{situation}\n{mistake}\n{correction}"), []).append(pk)
    for lang, ids in found.items():
        for start in range(0, len(ids), 10000):
            Lesson.objects.filter(pk__in=ids[start : start + 10000]).update(lang=lang)


def _weighted(config):
    SV = django.contrib.postgres.search.SearchVector
    return SV("situation", weight="A", config=config) + SV("correction", weight="B", config=config) + SV(
        "mistake", "trigger", weight="C", config=config
    )


class Migration(migrations.Migration):

    dependencies = [
        ("lessons", "0005_review"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="lesson", name="lesson_search_gin"),
        migrations.RemoveField(model_name="lesson", name="search_vector"),
        migrations.AddField(
            model_name="lesson",
            name="lang",
            field=models.CharField(blank=True, default="", max_length=8),
        ),
        migrations.RunPython(detect_languages, migrations.RunPython.noop),
        migrations.AddField(
            model_name="lesson",
            name="search_vector",
            field=models.GeneratedField(
                db_persist=True,
                expression=models.Case(
                    models.When(lang="en", then=_weighted("english")),
                    models.When(lang="pt", then=_weighted("portuguese")),
                    default=_weighted("simple"),
                ),
                output_field=django.contrib.postgres.search.SearchVectorField(),
            ),
        ),
        migrations.AddIndex(
            model_name="lesson",
            index=django.contrib.postgres.indexes.GinIndex(fields=["search_vector"], name="lesson_search_gin"),
        ),
    ]
