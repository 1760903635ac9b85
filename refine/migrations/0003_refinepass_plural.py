from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("refine", "0002_refine_reflexion")]

    operations = [
        migrations.AlterModelOptions(
            name="refinepass",
            options={"ordering": ["run", "number"], "verbose_name_plural": "refine passes"},
        ),
    ]
