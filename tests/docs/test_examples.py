"""The API examples in the docs (fenced ```sh / ```python blocks marked ``# doc-example: <name>``) run
against a live server: gunicorn, a real lesson worker and the fake LLM. A renamed field, a changed status
code or a broken shell line fails here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lessonboard.tokens import issue_token
from lessonq.models import Job, JobState
from lessons.models import Lesson
from lessons.review.models import Proposal
from lessons.usage.models import Retrieval
from tests.docs import docset
from tests.docs.conftest import Stack
from tests.support.wait import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

EXAMPLES = docset.examples()


def example(source: str, name: str) -> docset.Example:
    found = [e for e in EXAMPLES if e.source.name == source and e.name == name]
    assert found, f"no '# doc-example: {name}' block in {source}"
    return found[0]


def run_ok(stack: Stack, ex: docset.Example, tmp_path: Path) -> str:
    token = issue_token("docs-examples", ("full",)).plaintext
    done = stack.run(ex, token, tmp_path)
    assert done.returncode == 0, f"{ex.id} (line {ex.line}) failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_it_finds_the_marked_examples() -> None:
    names = {e.id for e in EXAMPLES}
    assert {"README:tour-trigger", "README:tour-retrieve", "README:tour-review", "agents:agents-python"} <= names
    assert len(names) == len(EXAMPLES), "two examples share a name in one file"


@pytest.mark.parametrize("ex", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_every_marked_example_runs_against_a_live_server(stack: Stack, ex: docset.Example, tmp_path: Path) -> None:
    out = run_ok(stack, ex, tmp_path)
    assert out.strip(), f"{ex.id} printed nothing"
    if ex.language == "sh":
        body: Any = json.loads(out)  # every curl example answers JSON
        assert "error" not in body


def test_the_tour_turns_a_trigger_into_a_lesson_and_a_pending_proposal(stack: Stack, tmp_path: Path) -> None:
    accepted = json.loads(run_ok(stack, example("README.md", "tour-trigger"), tmp_path))
    assert accepted["status"] == "accepted"
    job = wait_for(
        lambda: Job.objects.filter(pk=accepted["job_id"], state=JobState.SUCCEEDED).first(),
        timeout=60,
        what="the tour's job to succeed",
    )
    assert job is not None and job.lesson_id is not None  # wait_for returned it: it is there
    lesson = Lesson.objects.get(pk=job.lesson_id)
    assert lesson.correction == "make targeted edits and run the build after each"
    wait_for(
        lambda: Lesson.objects.filter(pk=lesson.pk, embedding__isnull=False).exists(),
        timeout=60,
        what="the tour's lesson to be embedded",
    )

    again = json.loads(run_ok(stack, example("README.md", "tour-trigger"), tmp_path))
    # Learnt already: the lesson counts the second occurrence (docs/queue.md#repeated-failures).
    assert again == {"job_id": accepted["job_id"], "status": "reinforced", "lesson_id": lesson.pk, "occurrences": 2}

    found = json.loads(run_ok(stack, example("README.md", "tour-retrieve"), tmp_path))
    assert found["memory_block"].startswith("## Long-term Memory\n- [lesson] LESSON: editing a large source file")

    reviewed = json.loads(run_ok(stack, example("README.md", "tour-review"), tmp_path))
    assert [i["proposal"]["target"] for i in reviewed["applied"]] == ["memory"]
    assert [i["proposal"]["target"] for i in reviewed["pending"]] == ["lesson"]
    assert Proposal.objects.filter(pk=reviewed["pending"][0]["id"], status="pending").exists()


def test_the_python_example_injects_the_lessons_and_reports_the_failure(stack: Stack, tmp_path: Path) -> None:
    from lessonboard.models import Workspace
    from lessons.store import persist_lesson

    persist_lesson(
        situation="editing a large Go file",
        mistake="rewrote it whole",
        correction="make targeted edits and keep the build green",
        tags=["go"],
        trigger="error",
        workspace=Workspace.objects.for_slug("shop"),
    )
    wait_for(
        lambda: not Lesson.objects.filter(embedding__isnull=True).exists(), timeout=60, what="the lesson's embedding"
    )
    out = run_ok(stack, example("agents.md", "agents-python"), tmp_path)
    assert "'status': 'accepted'" in out and "'outcome': 'failure'" in out

    prompts = [
        r.json["messages"][0]["content"]
        for r in stack.llm.chat_requests()
        if r.json["messages"][0]["content"].startswith("You are a careful coding agent.")
    ]
    assert prompts, "the example never called its model"
    assert "\n\n## Long-term Memory\n- [lesson] LESSON: editing a large Go file" in prompts[-1]
    job = Job.objects.get(task="Edit a large Go file without breaking the build")
    assert job.outcome == "ERROR: the model returned an empty answer" and job.agent == "coder"
    # The report named its retrieval: that retrieval is recorded as a failed task.
    retrieval = Retrieval.objects.get(task="Edit a large Go file without breaking the build")
    assert retrieval.success is False and retrieval.returned == 1


def test_the_outcome_example_records_how_the_task_of_its_retrieval_went(stack: Stack, tmp_path: Path) -> None:
    answer = json.loads(run_ok(stack, example("agents.md", "agents-outcome"), tmp_path))
    retrieval = Retrieval.objects.get(pk=answer["retrieval_id"])
    assert retrieval.task == "Add a database migration for the orders table" and retrieval.agent == "coder"
    assert retrieval.success is True and retrieval.outcome_note == "the migration ran in CI"
    assert answer == {"retrieval_id": retrieval.pk, "success": True, "lessons": []}


def test_the_memory_example_saves_tags_and_reads_back_a_lesson_with_its_history(stack: Stack, tmp_path: Path) -> None:
    answer = json.loads(run_ok(stack, example("agents.md", "agents-memory"), tmp_path))
    lesson = Lesson.objects.get(pk=answer["lesson_id"])
    assert lesson.tags == ["migrations"] and lesson.workspace is not None and lesson.workspace.slug == "shop"
    assert [v["action"] for v in answer["versions"]] == ["edit", "create"]
    assert answer["versions"][0]["reason"] == "findable by tag"
    assert answer["versions"][0]["actor"] == "token:docs-examples"


def test_the_tours_step_4_shows_the_outage_then_a_dead_job_and_its_retry(
    own_stack: Stack, tmp_path: Path, settings: Any
) -> None:
    """Step 4 as the README tells it: the model stopped, the job waits (breaker open, banner, degraded
    readiness) and runs once the model is back; a reply the parser refuses kills a job at once; its retry
    from the terminal, with the model answering again, makes the lesson."""
    import subprocess
    import sys
    import urllib.request
    from datetime import timedelta

    from django.test import Client
    from django.utils import timezone

    from lessonboard import breaker
    from lessonq.generation import NO_BLOCKS
    from tests.factories import UserFactory
    from tests.fakes.tour_llm import respond
    from tests.support.processes import ROOT

    settings.LLM_BASE_URL, settings.LLM_MODEL = own_stack.llm.url, own_stack.llm.model  # the breaker's key
    port = own_stack.llm.port
    own_stack.llm.stop()  # "Stop the model"
    try:
        waiting = json.loads(run_ok(own_stack, example("README.md", "tour-outage"), tmp_path))
        wait_for(breaker.is_open, timeout=90, what="the breaker to open after 5 failed calls")
        job = wait_for(
            lambda: (
                Job.objects.filter(pk=waiting["job_id"], state__in=(JobState.PENDING, JobState.RETRY_WAIT))
                .exclude(waiting_reason="")
                .first()
            ),
            timeout=60,
            what="the job to wait with its reason",
        )
        assert job.waiting_reason.startswith("LLM unreachable since") and job.state != JobState.DEAD
        with urllib.request.urlopen(own_stack.url + "/readyz", timeout=10) as answer:
            assert json.loads(answer.read())["status"] == "degraded"
        client = Client()
        client.force_login(UserFactory(username="tour-operator", role="operator"))
        queue = client.get("/queue/?tab=retrying").content.decode()
        assert "LLM unreachable since" in queue and waiting["job_id"] in queue
    finally:
        own_stack.llm.start(port=port)  # "Start the model again"
    settings.LLM_API_KEY = "sk-test"
    assert breaker.probe(now=timezone.now() + timedelta(minutes=1)) == "closed"  # what beat's probe does in 15 s
    assert not breaker.is_open()
    # Closing it fans a sweep out to every node (lessonq.tasks.sweep_all, on the default queue, which serve's
    # worker consumes); the docs stack's worker has only its node's queues, so the fan-out runs here.
    from lessonq.tasks import sweep_all

    sweep_all.apply()
    wait_for(
        lambda: Job.objects.filter(pk=waiting["job_id"], state=JobState.SUCCEEDED).exists(),
        timeout=60,
        what="the waiting job to run once the model is back",
    )

    own_stack.llm.responder = lambda request: respond(request, prose=True)  # tour_llm --prose
    try:
        refused = json.loads(run_ok(own_stack, example("README.md", "tour-refused"), tmp_path))
        dead = wait_for(
            lambda: Job.objects.filter(pk=refused["job_id"], state=JobState.DEAD).first(),
            timeout=60,
            what="the refused job to die",
        )
    finally:
        own_stack.llm.responder = respond  # tour_llm without --prose
    assert dead.last_error == NO_BLOCKS and dead.attempts == 1  # at once: no retries of a refused reply
    readme = (docset.ROOT / "README.md").read_text()
    assert "python3 lb.py manage reflect retry <job id>" in readme
    done = subprocess.run(
        [sys.executable, "manage.py", "reflect", "retry", dead.pk],
        env=own_stack.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    job = wait_for(
        lambda: Job.objects.filter(pk=dead.pk, state=JobState.SUCCEEDED).first(),
        timeout=60,
        what="the retried job to become a lesson",
    )
    assert job.lesson_id is not None
