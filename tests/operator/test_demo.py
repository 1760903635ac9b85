"""Demo data: seeded only when asked, through the domain paths, clearly marked, removed by one command."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.cache import cache
from django.core.management import call_command

from console import demo
from lessonboard.models import Workspace
from lessonq.models import Job, JobState
from lessonq.paths import dlq, wal
from lessons.models import Lesson, LessonVersion
from lessons.reflect.models import DocProposal
from lessons.review.models import Proposal
from refine.models import RefineRun

pytestmark = pytest.mark.django_db


def test_it_is_never_seeded_unless_asked(client_as, carol, settings):
    settings.EMBEDDED_DATABASE = True  # the hint is for the newcomer's embedded database
    cache.delete("lessonboard:demo-banner")
    assert not Workspace.objects.filter(slug="demo").exists()
    page = client_as(carol).get("/").content.decode()
    assert "python3 lb.py serve --demo" in page  # the hint on an empty embedded database


def test_an_empty_production_database_gets_no_demo_hint(client_as, carol, settings, monkeypatch):
    settings.EMBEDDED_DATABASE = False
    monkeypatch.setitem(settings.DATABASES["default"], "HOST", "db.internal")  # not the embedded server
    cache.delete("lessonboard:demo-banner")
    page = client_as(carol).get("/").content.decode()
    assert "serve --demo" not in page


def test_it_seeds_a_marked_workspace_and_removes_it_with_one_command(client_as, carol, queue_dir):
    out = StringIO()
    call_command("demo", stdout=out)
    assert "Demo workspace 'demo' seeded" in out.getvalue()
    ws = Workspace.objects.get(slug="demo")
    assert "sample data" in ws.name
    jobs = Job.objects.filter(workspace=ws)
    states = sorted(jobs.values_list("state", flat=True))
    assert states == sorted([JobState.SUCCEEDED] * 3 + [JobState.RETRY_WAIT] + [JobState.DEAD] * 2)
    dead = list(jobs.filter(state=JobState.DEAD))
    assert all(dlq().exists(j.id) for j in dead) and len({j.fingerprint for j in dead}) == 2
    assert Lesson.objects.filter(workspace=ws).count() == 3
    assert LessonVersion.objects.filter(lesson__workspace=ws).count() == 4  # one lesson edited once
    assert Proposal.objects.pending().filter(workspace=ws).count() == 3
    run = RefineRun.objects.get(agent=demo.AGENT)
    assert run.rolled_back and run.pass_count == 2
    rewrite = DocProposal.objects.get(workspace=ws)
    assert rewrite.is_pending and rewrite.reasons == ["routes/controllers touched (1 files)"]
    handbook = demo.repository_root() / "handbook"
    assert "/refunds" not in (handbook / ".aioson/context/bootstrap/how-it-works.md").read_text()  # held, not written
    assert "1 doc rewrite waiting for a reviewer" in out.getvalue()

    client = client_as(carol)
    page = client.get("/").content.decode()
    assert 'id="demo-banner"' in page and "manage demo --remove" in page
    inbox = client.get("/inbox/").content.decode()
    assert "the model answered with prose" in inbox and "Tests run with python3 lb.py test" in inbox
    assert f"#proposal-{rewrite.pk}" in inbox and "Rewrite of 1 doc file in demo" in inbox
    workspace_page = client.get("/workspaces/demo/").content.decode()
    assert f'id="proposal-{rewrite.pk}"' in workspace_page and "+Deployed" not in workspace_page
    assert "Refunds now have their own route, /refunds" in workspace_page  # the diff a reviewer decides on
    assert f"Refine run #{run.pk} rolled back" in inbox

    again = StringIO()
    call_command("demo", stdout=again)
    assert "already exists" in again.getvalue() and Job.objects.filter(workspace=ws).count() == 6

    retrying = jobs.get(state=JobState.RETRY_WAIT).id
    removed = StringIO()
    call_command("demo", "--remove", stdout=removed)
    assert "6 jobs, 3 lessons, 3 proposals, 1 refine run(s), 1 doc rewrite(s)" in removed.getvalue()
    assert not Workspace.objects.filter(slug="demo").exists()
    assert not Job.objects.exists() and not Lesson.objects.exists() and not Proposal.objects.exists()
    assert not RefineRun.objects.exists()
    assert not DocProposal.objects.exists() and not demo.repository_root().exists()
    assert len(dead) == 2 and not wal().exists(retrying) and not any(dlq().exists(j.id) for j in dead)
