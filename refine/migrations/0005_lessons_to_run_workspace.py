"""Lessons approved from a refine run's "propose as a lesson" were staged in LESSONBOARD_REFINE_PROPOSAL_WORKSPACE
(default ``refine``) whatever the run's workspace. Each such lesson whose run named a workspace moves to that
workspace, where an agent retrieving in it finds it (docs/lessons.md#scopes). Lessons whose run named none, or
that changed workspace since, stay where they are. Irreversible by nature (the old placement was the bug)."""

import re

from django.db import migrations

ORIGIN = re.compile(r"^Lesson proposed from refine run (\d+) pass \d+\.")


def forwards(apps, schema_editor):
    Proposal = apps.get_model("lessons", "Proposal")
    RefineRun = apps.get_model("refine", "RefineRun")
    Lesson = apps.get_model("lessons", "Lesson")
    rows = Proposal.objects.filter(target="lesson", lesson_ref__isnull=False).select_related("run")
    for proposal in rows.iterator():
        match = ORIGIN.match(proposal.run.summary or "")
        if not match:
            continue
        run = RefineRun.objects.filter(pk=int(match.group(1)), workspace__isnull=False).first()
        if run is None or run.workspace_id == proposal.workspace_id:
            continue
        Lesson.objects.filter(pk=proposal.lesson_ref_id, workspace_id=proposal.workspace_id).update(
            workspace_id=run.workspace_id
        )


class Migration(migrations.Migration):
    dependencies = [("refine", "0004_workspace_scope"), ("lessons", "0012_scopes")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
