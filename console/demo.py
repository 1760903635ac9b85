"""Sample data for a first look: a clearly marked ``demo`` workspace filled through the same domain paths
real traffic takes, and removed again with one command. Never seeded unless asked
(``python3 lb.py serve --demo`` or ``python3 lb.py manage demo``).

What it makes: six Reflexion triggers accepted by the queue's ingest path, of which three succeed (their
lessons are written by the lesson store, one edited into a second version), one waits to retry and two
die (two error groups in the DLQ); three memory proposals held for a person by the review pass; a refine
run whose second pass drifts and is rolled back; a doc rewrite held by the workspace's human gate, made
by doc reflection's prepare and commit over a small git repository the demo creates
(``handbook`` under ``DEMO_REPOSITORY_ROOT``, by default ``<data dir>/demo``: an allowed workspace root
while it exists). The LLM answers are canned (the demo needs no LLM).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from lessonboard.llm import ChatResult
from lessonboard.models import Workspace
from lessonq import ingest, processing
from lessonq.generation import GeneratedLesson
from lessonq.models import Job, JobAttempt
from lessonq.paths import dlq, wal
from lessons.models import Lesson
from lessons.reflect.commit import commit_reflection
from lessons.reflect.models import DocProposal
from lessons.reflect.prepare import prepare_reflection
from lessons.reflect.repository import attach_repository
from lessons.review.learning import Verdict
from lessons.review.models import Proposal, ReviewRun
from lessons.review.staging import run_review
from lessons.store import edit_lesson
from refine import runs
from refine.models import RefineRun
from refine.refiner import Refiner

SLUG = "demo"
NAME = "Demo workspace (sample data: remove with `python3 lb.py manage demo --remove`)"
AGENT = "demo-agent"


@dataclass
class Seeded:
    created: bool
    jobs: dict[str, int] = field(default_factory=dict)  # state → count
    lessons: int = 0
    proposals: int = 0
    refine_runs: int = 0
    doc_rewrites: int = 0
    skipped: list[str] = field(default_factory=list)  # what could not be seeded here, and why


def repository_root() -> Path:
    """Where the demo's git repository lives (``DEMO_REPOSITORY_ROOT``); ``lessons.reflect.repository``
    allows it while it exists."""
    return Path(settings.DEMO_REPOSITORY_ROOT)


def exists() -> bool:
    return Workspace.objects.filter(slug=SLUG).exists()


TRIGGERS = [
    # (task, outcome, trigger, what happens)
    ("deploy the payments service", "ERROR: helm upgrade timed out; release left half-applied", "error", "succeed"),
    ("rename the orders table", "ERROR: migration locked the table for 9 minutes", "error", "succeed"),
    ("answer a question about the API", "the answer cited an endpoint that does not exist", "hallucination", "succeed"),
    ("summarise the incident channel", "ERROR: LLM HTTP 503", "error", "retry"),
    ("triage the flaky test", "ERROR: pytest collected 0 items", "error", "die-prose"),
    ("upgrade the base image", "ERROR: apt-get failed: 404 Not Found", "error", "die-quota"),
]

LESSONS = {
    "deploy the payments service": (
        "deploying a service with helm",
        "ran helm upgrade without --atomic, so a timeout left the release half-applied",
        "use helm upgrade --atomic --timeout 10m so a failed upgrade rolls itself back",
    ),
    "rename the orders table": (
        "renaming a busy table in a migration",
        "renamed it in one step, holding an exclusive lock while the table was rewritten",
        "add the new name as a view first, move readers, then rename in a short transaction",
    ),
    "answer a question about the API": (
        "answering questions about our HTTP API",
        "cited /v2/orders/search, which does not exist",
        "check docs/api.md (or the URL list) before naming an endpoint",
    ),
}

ERRORS = {
    "retry": "transient: LLM HTTP 503 Service Unavailable (demo)",
    "die-prose": "permanent: the model answered with prose, not the lesson JSON (demo)",
    "die-quota": "permanent: LLM quota exceeded for this key (demo)",
}

PROPOSALS = [
    {"target": "memory", "op": "add", "content": "The payments service deploys with helm --atomic.", "score": 0.91},
    {"target": "user", "op": "add", "content": "Prefers short answers with the command first.", "score": 0.64},
    {
        "target": "memory",
        "op": "add",
        "content": "Tests run with python3 lb.py test, never bare pytest.",
        "score": 0.42,
    },
]

REFINE_DRAFT = "To deploy, run helm upgrade and check the pods."
REFINE_PASSES = [
    "<critique>\n- say --atomic\n</critique>\n<revised>\nTo deploy, run helm upgrade --atomic and watch the "
    "rollout with kubectl rollout status.\n</revised>",
    "<critique>\n- rewrite\n</critique>\n<revised>\nCooking pasta: boil salted water, add the pasta, stir "
    "now and then, and taste it a minute before the packet says.\n</revised>",
]


class CannedChat:
    """Stands in for the LLM during seeding: answers each call with the next canned text."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)

    def __call__(self, messages: Any, **_: Any) -> ChatResult:
        text = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return ChatResult(text=text, model="demo-canned", prompt_tokens=40, completion_tokens=30)


def seed() -> Seeded:
    """Create the demo workspace and its data; a second call changes nothing."""
    if exists():
        return Seeded(created=False)
    workspace = Workspace.objects.create(slug=SLUG, name=NAME)
    result = Seeded(created=True)
    _seed_queue(workspace, result)
    _seed_reviews(workspace, result)
    _seed_refine(result)
    _seed_doc_rewrite(workspace, result)
    return result


def _seed_queue(workspace: Workspace, result: Seeded) -> None:
    for task, outcome, trigger, fate in TRIGGERS:
        request = ingest.LessonRequest(task=task, attempt="(the agent's output)", outcome=outcome, trigger=trigger)
        queued = ingest.enqueue(request, agent=AGENT, workspace=workspace)
        job = Job.objects.get(pk=queued.job_id)
        if not job.claim(timeout=settings.LESSONQ_JOB_TIMEOUT):
            continue
        attempt = JobAttempt.objects.create(job=job, number=1, worker="demo")
        job.refresh_from_db()
        if fate == "succeed":
            situation, mistake, correction = LESSONS[task]
            lesson = GeneratedLesson(situation, mistake, correction, ["demo"], trigger)
            processing.succeed(job, attempt, lesson)
        elif fate == "retry":
            processing.retry_or_dead(job, attempt, ERRORS[fate])
        else:
            processing.finish_dead(job, ERRORS[fate], attempt=attempt)
        job.refresh_from_db()
        result.jobs[job.state] = result.jobs.get(job.state, 0) + 1
    first = Lesson.objects.filter(workspace=workspace).order_by("id").first()
    if first is not None:
        edit_lesson(
            first,
            correction=first.correction + " (and keep --timeout above the slowest pod's readiness time)",
            actor="demo",
            reason="demo: a second version",
        )
    result.lessons = Lesson.objects.filter(workspace=workspace).count()


def _seed_reviews(workspace: Workspace, result: Seeded) -> None:
    def hold(proposal: Any) -> Verdict:
        return Verdict("hold", "demo: waits for a person", gate="human", auto_approve=proposal.score >= 0.7)

    raw = [{**p, "rationale": "seen in the demo session"} for p in PROPOSALS]
    run = run_review(
        workspace, "demo session: deployed payments, renamed a table", agent=AGENT, proposer=lambda s: raw, gate=hold
    )
    result.proposals = run.run.proposals.count()


def _seed_refine(result: Seeded) -> None:
    run = RefineRun.objects.create(
        task="[demo] explain how to deploy", original_draft=REFINE_DRAFT, agent=AGENT, max_passes=2
    )
    runs.execute_run(run.pk, refiner=Refiner(CannedChat(REFINE_PASSES)))
    result.refine_runs = 1


HANDBOOK_BOOT = ".aioson/context/bootstrap"
HANDBOOK_DOC = "---\nname: {name}\ngenerated_at: 2026-01-05T09:00:00Z\n---\n\n# {title}\n\n{body}\n"
HANDBOOK = {
    "what-is.md": ("What it is", "The payments service takes card payments for the shop."),
    "how-it-works.md": ("How it works", "A Flask app behind nginx; orders live in PostgreSQL."),
    "what-it-does.md": ("What it does", "Charges cards and records each order."),
    "current-state.md": ("Current state", "Deployed with helm; one replica."),
}
HANDBOOK_REWRITE = "Refunds now have their own route, /refunds, handled by routes/refunds.py."
GIT_ENV = {
    "GIT_AUTHOR_NAME": "lessonboard demo",
    "GIT_AUTHOR_EMAIL": "demo@lessonboard.invalid",
    "GIT_COMMITTER_NAME": "lessonboard demo",
    "GIT_COMMITTER_EMAIL": "demo@lessonboard.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ENV}, check=True, capture_output=True)


def _handbook_doc(name: str, extra: str = "", generated_at: str = "2026-01-05T09:00:00Z") -> str:
    title, body = HANDBOOK[name]
    text = HANDBOOK_DOC.format(name=name, title=title, body=body + extra)
    return text.replace("2026-01-05T09:00:00Z", generated_at)


def _seed_doc_rewrite(workspace: Workspace, result: Seeded) -> None:
    """A git repository with AIOSON bootstrap docs and a new route, attached with the human gate on; the
    agent's rewrite of how-it-works.md goes through prepare and commit and waits for a reviewer."""

    if shutil.which("git") is None:
        result.skipped.append("doc rewrite (git is not installed)")
        return
    repo = repository_root() / "handbook"
    shutil.rmtree(repo, ignore_errors=True)  # a leftover of an interrupted seed: the demo's own folder
    (repo / HANDBOOK_BOOT).mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    for name in HANDBOOK:
        (repo / HANDBOOK_BOOT / name).write_text(_handbook_doc(name), encoding="utf-8")
    (repo / "app.py").write_text("from flask import Flask\napp = Flask(__name__)\n", encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "payments service")
    (repo / "routes").mkdir()
    (repo / "routes" / "refunds.py").write_text("# POST /refunds\n", encoding="utf-8")
    _git(repo, "add", "-A")
    attach_repository(workspace, repo_path=str(repo), human_gate=True)
    prepare_reflection(workspace=workspace, agent=AGENT)
    rewrite = _handbook_doc("how-it-works.md", " " + HANDBOOK_REWRITE, generated_at="2026-01-06T10:00:00Z")
    answer = commit_reflection(workspace=workspace, files={f"{HANDBOOK_BOOT}/how-it-works.md": rewrite}, agent=AGENT)
    if answer.get("pending"):
        result.doc_rewrites = 1
    else:
        result.skipped.append(f"doc rewrite ({answer.get('error') or answer})")


@dataclass
class Removed:
    jobs: int = 0
    lessons: int = 0
    proposals: int = 0
    refine_runs: int = 0
    doc_rewrites: int = 0


def remove() -> Removed:
    """Delete everything the demo made (its queue files too); the audit log keeps its record of it."""

    done = Removed()
    workspace = Workspace.objects.filter(slug=SLUG).first()
    demo_runs = RefineRun.objects.filter(agent=AGENT, task__startswith="[demo]")
    if workspace is None:
        done.refine_runs = demo_runs.count()
        demo_runs.delete()
        return done
    with transaction.atomic():
        jobs = Job.objects.filter(workspace=workspace)
        for job_id in jobs.values_list("id", flat=True):
            wal().ack(job_id)
            dlq().ack(job_id)
        done.jobs = jobs.count()
        jobs.delete()
        lessons = Lesson.objects.filter(workspace=workspace)
        done.lessons = lessons.count()
        lessons.delete()
        done.proposals = Proposal.objects.filter(workspace=workspace).count()
        done.doc_rewrites = DocProposal.objects.filter(workspace=workspace).count()
        ReviewRun.objects.filter(workspace=workspace).delete()
        done.refine_runs = demo_runs.count()
        demo_runs.delete()
        workspace.delete()
    # Only what the demo made: the root is a setting and may hold other things.
    shutil.rmtree(repository_root() / "handbook", ignore_errors=True)
    try:
        repository_root().rmdir()
    except OSError:  # not there, or not empty
        pass
    return done
