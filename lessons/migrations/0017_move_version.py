"""The history of a lesson that the migration ``refine 0005`` moved says so.

``refine 0005`` moved each lesson approved from a refine pass out of the staging workspace into its run's
workspace with a plain update, so the lesson's history did not show the move. This adds one version to
each such lesson: action ``move``, actor ``system``, the reason naming both workspaces and the migration,
the snapshot the lesson's fields as they are (the move changed none of them). A lesson is one of those when
its proposal names a refine run with a workspace other than the proposal's and the lesson now sits in the
run's workspace — the same test ``refine 0005`` made, from the other side. Running it again adds nothing.
"""

import re

from django.db import migrations, models
from django.utils import timezone

ORIGIN = re.compile(r"^Lesson proposed from refine run (\d+) pass \d+\.")
SNAPSHOT_FIELDS = (
    "situation", "mistake", "correction", "tags", "trigger", "content", "fact_id", "confidence", "provenance",
    "status", "scope", "access_count",
)  # fmt: skip  (Lesson.snapshot's fields; a migration cannot call the model's methods)


def reason_for(source: str, target: str) -> str:
    return (
        f"moved from workspace {source} to {target}, its refine run's, by migration refine 0005 "
        "(lessons from a refine pass belong to the run's workspace)"
    )


def forwards(apps, schema_editor):
    Proposal = apps.get_model("lessons", "Proposal")
    RefineRun = apps.get_model("refine", "RefineRun")
    Lesson = apps.get_model("lessons", "Lesson")
    LessonVersion = apps.get_model("lessons", "LessonVersion")
    rows = Proposal.objects.filter(target="lesson", lesson_ref__isnull=False).select_related("run", "workspace")
    for proposal in rows.iterator():
        match = ORIGIN.match(proposal.run.summary or "")
        if not match:
            continue
        runs = RefineRun.objects.filter(pk=int(match.group(1)), workspace__isnull=False).select_related("workspace")
        run = runs.first()
        if run is None or run.workspace_id == proposal.workspace_id:
            continue
        lesson = Lesson.objects.filter(pk=proposal.lesson_ref_id, workspace_id=run.workspace_id).first()
        if lesson is None:
            continue
        reason = reason_for(proposal.workspace.slug, run.workspace.slug)
        versions = LessonVersion.objects.filter(lesson=lesson)
        if versions.filter(action="move", reason=reason).exists():
            continue
        number = (versions.aggregate(top=models.Max("number"))["top"] or 0) + 1
        LessonVersion.objects.create(
            lesson=lesson,
            number=number,
            action="move",
            snapshot={name: getattr(lesson, name) for name in SNAPSHOT_FIELDS},
            actor="system",
            reason=reason,
            created_at=timezone.now(),
        )


class Migration(migrations.Migration):
    dependencies = [("lessons", "0016_newest_index"), ("refine", "0005_lessons_to_run_workspace")]
    operations = [
        migrations.AlterField(
            model_name="lessonversion",
            name="action",
            field=models.CharField(
                choices=[
                    ("create", "created"), ("edit", "edited"), ("reinforce", "reinforced"),
                    ("supersede", "superseded"), ("archive", "archived"), ("restore", "restored"),
                    ("merge", "merged"), ("delete", "deleted"), ("share", "shared"), ("unshare", "unshared"),
                    ("move", "moved to another workspace"),
                ],  # fmt: skip
                max_length=20,
            ),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
