"""Tenancy by construction (docs/security.md#tenancy-and-the-gate): two workspaces never share a job, a
lesson or an answer that names the other's objects."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from lessonboard.tokens import issue_token
from lessonq import processing
from lessonq.ingest import LessonRequest
from lessonq.models import Job
from lessons.models import Lesson
from tests.factories import WorkspaceFactory
from tests.fakes.openai_server import Reply
from tests.support.clients import ApiClient

pytestmark = pytest.mark.django_db

TRIGGERS = "/api/v1/reflexion/triggers"
LESSONS = "/api/v1/lessons"
RETRIEVE = "/api/v1/lessons/retrieve"
LESSON = (
    "<situation>deploying with helm to the cluster</situation><mistake>waited on a helm timeout</mistake>"
    "<correction>raise the helm timeout and watch the rollout</correction><tags>helm, deploy</tags>"
)
FAILURE = {"task": "deploy the app with helm", "error": "helm timed out", "agent": "coder"}


@pytest.fixture(autouse=True)
def _queue(settings: Any, tmp_path: Path) -> None:
    """Ingest writes to this test's own WAL folder and node queue (no worker takes the messages)."""
    base = tmp_path / "lessonq"
    for sub in ("wal", "dlq", "quarantine", "expired"):
        (base / sub).mkdir(parents=True)
    settings.LESSONQ_BASE_DIR = base
    settings.NODE = "q3" + uuid.uuid4().hex[:8]
    settings.LESSONQ_QUEUE = f"lessonq.{settings.NODE}"
    settings.EMBEDDING_PROVIDER = "none"


def bound(slug: str, scopes: tuple[str, ...] = ("full",)) -> ApiClient:
    WorkspaceFactory(slug=slug)
    return ApiClient(issue_token(f"agent-{slug}", list(scopes), workspaces=[slug]).plaintext)


def test_the_same_failure_in_two_workspaces_is_two_jobs_and_two_lessons(fake_openai: Any) -> None:
    shop, billing = bound("shop"), bound("billing")
    first = shop.post(TRIGGERS, {**FAILURE, "workspace": "shop"})
    second = billing.post(TRIGGERS, {**FAILURE, "workspace": "billing"})
    assert (first.status_code, second.status_code) == (202, 202)
    assert (first.json()["status"], second.json()["status"]) == ("accepted", "accepted")
    shop_job, billing_job = first.json()["job_id"], second.json()["job_id"]
    assert shop_job != billing_job  # billing's answer does not name shop's job
    # Both are chatcli-shaped ids, and each job still knows chatcli's own id of the request.
    chatcli = LessonRequest(task=FAILURE["task"], attempt="", outcome="ERROR: helm timed out", trigger="error").job_id
    jobs = {job.pk: job for job in Job.objects.all()}
    assert set(jobs) == {shop_job, billing_job}
    assert {job.chatcli_job_id for job in jobs.values()} == {chatcli}
    assert chatcli not in jobs  # a workspace's job is keyed by its workspace too
    assert (jobs[shop_job].workspace.slug, jobs[billing_job].workspace.slug) == ("shop", "billing")  # type: ignore[union-attr]

    # The same report again in one workspace is that workspace's own duplicate.
    again = billing.post(TRIGGERS, {**FAILURE, "workspace": "billing"})
    assert (again.json()["status"], again.json()["job_id"]) == ("deduped", billing_job)

    fake_openai.script(Reply(text=LESSON), Reply(text=LESSON))
    assert processing.process(shop_job) == "success"
    assert processing.process(billing_job) == "success"
    lessons = {lesson.workspace.slug: lesson for lesson in Lesson.objects.all()}  # type: ignore[union-attr]
    assert set(lessons) == {"shop", "billing"}  # the same text is two lessons, not a reinforcement across
    assert lessons["shop"].source_job_id == shop_job and lessons["billing"].source_job_id == billing_job
    assert lessons["shop"].confidence == lessons["billing"].confidence

    for client, slug in ((shop, "shop"), (billing, "billing")):
        found = client.post(RETRIEVE, {"task": "deploy the app with helm", "workspace": slug}).json()
        assert [hit["id"] for hit in found["lessons"]] == [lessons[slug].pk], slug
        assert found["lessons"][0]["workspace"] == slug


def test_an_exact_duplicate_lesson_in_another_workspace_is_not_reinforced() -> None:
    a, b = bound("ws-a"), bound("ws-b")
    body = {"situation": "running migrations", "correction": "take a backup first", "confidence": 0.6}
    theirs = b.post(LESSONS, {**body, "workspace": "ws-b"})
    assert (theirs.status_code, theirs.json()["action"]) == (201, "created")
    ours = a.post(LESSONS, {**body, "workspace": "ws-a"})
    assert (ours.status_code, ours.json()["action"]) == (201, "created")
    assert ours.json()["lesson"]["workspace"] == "ws-a"
    assert ours.json()["lesson"]["id"] != theirs.json()["lesson"]["id"]
    assert Lesson.objects.get(pk=theirs.json()["lesson"]["id"]).confidence == 0.6  # untouched
    # In its own workspace the same text is the exact duplicate it always was.
    again = a.post(LESSONS, {**body, "workspace": "ws-a"})
    assert (again.status_code, again.json()["action"]) == (200, "reinforced")
    assert again.json()["lesson"]["id"] == ours.json()["lesson"]["id"]


# --- the validation the docs promise ---------------------------------------------------------------------
@pytest.mark.parametrize("body", [{"task": "", "error": "boom"}, {"task": " \n ", "error": "boom"}])
def test_an_empty_task_is_refused(body: dict[str, str]) -> None:
    response = ApiClient(issue_token("agent", ["full"]).plaintext).post(TRIGGERS, body)
    assert (response.status_code, response.json()["field"]) == (400, "task")
    assert not Job.objects.exists()


def test_an_empty_raw_task_is_refused() -> None:
    body = {"Task": "", "Attempt": "a", "Outcome": "o", "Trigger": "error"}
    response = ApiClient(issue_token("agent", ["full"]).plaintext).post(TRIGGERS, body)
    assert (response.status_code, response.json()["field"]) == (400, "Task")


def test_a_413_states_the_limit_in_bytes_and_the_setting(settings: Any) -> None:
    client = ApiClient(issue_token("agent", ["full"]).plaintext)
    WorkspaceFactory(slug="proj")
    settings.REVIEW_SUMMARY_MAX = 10
    response = client.post("/api/v1/reviews", {"summary": "x" * 5000, "workspace": "proj"})
    assert (response.status_code, response.json()["field"]) == (413, "body")
    error = response.json()["error"]
    assert f"{10 * 4 + 4096} bytes" in error and "LESSONBOARD_REVIEW_SUMMARY_MAX" in error
    fixed = client.post(RETRIEVE, {"task": "x" * (300 * 1024)})
    assert fixed.status_code == 413 and f"{256 * 1024} bytes" in fixed.json()["error"]
    assert "fixed limit" in fixed.json()["error"] and "DATA_UPLOAD" not in fixed.json()["error"]


# --- repeated failures count (docs/queue.md#repeated-failures) ---------------------------------------------
def test_a_repeated_failure_after_its_job_finished_is_a_second_occurrence_of_its_lesson(fake_openai: Any) -> None:
    shop = bound("shop")
    job_id = shop.post(TRIGGERS, {**FAILURE, "workspace": "shop"}).json()["job_id"]
    fake_openai.script(Reply(text=LESSON))
    assert processing.process(job_id) == "success"
    lesson = Lesson.objects.get(source_job_id=job_id)
    assert (lesson.occurrences, lesson.last_seen) == (1, None)

    again = shop.post(TRIGGERS, {**FAILURE, "workspace": "shop"})
    assert again.status_code == 202
    assert again.json() == {"job_id": job_id, "status": "reinforced", "lesson_id": lesson.pk, "occurrences": 2}
    lesson.refresh_from_db()
    assert lesson.occurrences == 2 and lesson.last_seen is not None
    assert lesson.versions.order_by("-number").first().reason.startswith("the same failure was reported again")  # type: ignore[union-attr]
    from lessonq.paths import wal

    assert not wal().exists(job_id)  # nothing left to run: the record was removed again
    assert Job.objects.get(pk=job_id).state == "succeeded"
    listed = shop.post(RETRIEVE, {"task": "deploy the app with helm", "workspace": "shop"}).json()["lessons"]
    assert listed[0]["occurrences"] == 2


def test_a_repeated_failure_whose_lesson_was_archived_runs_again(fake_openai: Any) -> None:
    from lessons.store import set_status

    shop = bound("shop")
    job_id = shop.post(TRIGGERS, {**FAILURE, "workspace": "shop"}).json()["job_id"]
    fake_openai.script(Reply(text=LESSON))
    assert processing.process(job_id) == "success"
    first = Lesson.objects.get(source_job_id=job_id)
    set_status(first, "archived", actor="user:carol", reason="wrong lesson")

    again = shop.post(TRIGGERS, {**FAILURE, "workspace": "shop"})
    assert again.json() == {"job_id": job_id, "status": "accepted"}
    assert Job.objects.get(pk=job_id).state == "pending"
    fake_openai.script(Reply(text=LESSON.replace("raise the helm timeout", "split the release")))
    assert processing.process(job_id) == "success"
    second = Lesson.objects.get(source_job_id=job_id)
    assert second.pk != first.pk and "split the release" in second.correction
    assert Job.objects.get(pk=job_id).lesson_id == second.pk


def test_the_lessons_page_shows_and_sorts_by_occurrences(client_as: Any, carol: Any) -> None:
    from lessons.store import persist_lesson

    once = persist_lesson(situation="s1 alpha", mistake="", correction="c1 alpha", tags=[], trigger="manual").lesson
    often = persist_lesson(situation="s2 beta", mistake="", correction="c2 beta", tags=[], trigger="manual").lesson
    Lesson.objects.filter(pk=often.pk).update(occurrences=5)
    html = client_as(carol).get("/lessons/", {"sort": "most_repeated"}).content.decode()
    assert "seen 5×" in html and html.index("c2 beta") < html.index("c1 alpha")
    detail = client_as(carol).get(f"/lessons/{once.pk}/").content.decode()
    assert "seen 1×" in detail


# --- the gate is the server's (docs/reviews.md#who-scores) -----------------------------------------------
def test_the_server_scores_an_agents_proposal_with_the_heuristic_or_the_review_model(
    fake_openai: Any, settings: Any
) -> None:
    from lessons.review.proposals import parse_proposal
    from lessons.review.scoring import heuristic_score, rescored

    policy = parse_proposal(
        {"target": "memory", "op": "add", "content": "Deploys are allowed on Fridays.", "score": 0.99}
    )
    fact = parse_proposal(
        {
            "target": "memory",
            "op": "add",
            "content": "The staging cluster is called kestrel.",
            "rationale": "seen in three deploy logs this week",
            "score": 0.1,
        }
    )
    assert heuristic_score(policy)[0] == 0.4 and heuristic_score(fact)[0] == 0.8
    # A proposer cannot set the server's fields itself.
    forged = parse_proposal({"target": "memory", "op": "add", "content": "x", "score": 0.5, "agent_score": 0.1})
    assert forged.agent_score is None

    fake_openai.script(Reply(text='{"score": 0.15, "reason": "grants a permission"}'))
    scored = rescored(policy)
    assert (scored.score, scored.agent_score) == (0.15, 0.99)
    assert "grants a permission" in scored.score_reason
    fake_openai.script(Reply(text="not json"))
    assert rescored(policy).score == 0.4  # the model failed: the heuristic scores it
    asked = len(fake_openai.chat_requests())
    # MCP's web process had no place free for LLM work: the heuristic, without asking the model.
    assert rescored(policy, model=False).score == 0.4 and len(fake_openai.chat_requests()) == asked
    settings.LLM_BASE_URL = ""
    assert "server heuristic" in rescored(fact).score_reason


def test_the_review_models_score_is_read_from_a_real_models_reply(fake_openai: Any) -> None:
    """A reasoning block first, a fence with a postscript, a sentence before the object: the score is read
    (it was the heuristic's, after a paid call); an integer too large for a float is out of range."""
    from lessons.review.proposals import parse_proposal
    from lessons.review.scoring import rescored

    policy = parse_proposal(
        {"target": "memory", "op": "add", "content": "Deploys are allowed on Fridays.", "score": 0.9}
    )
    for reply in (
        Reply(text='{"score": 0.15, "reason": "grants a permission"}', think="It states a rule; low."),
        Reply(text='```json\n{"score": 0.15, "reason": "grants a permission"}\n```\nHope this helps!'),
        Reply(text='Here is my verdict: {"score": 0.15, "reason": "grants a permission"}'),
    ):
        fake_openai.script(reply)
        scored = rescored(policy)
        assert (scored.score, scored.score_reason.startswith("review model")) == (0.15, True)
    fake_openai.script(Reply(text='{"score": 1' + "0" * 400 + ', "reason": "x"}'))
    scored = rescored(policy)
    assert scored.score == 0.4 and "could not score it" in scored.score_reason


# --- reflect verbs are not lessons by accident ----------------------------------------------------------
@pytest.mark.parametrize(
    ("words", "meant"),
    [(["retyr", "0123456789abcdef"], "retry 0123456789abcdef"), (["faild"], "failed"), (["lsit"], "list")],
)
def test_a_mistyped_reflect_verb_asks_and_saves_nothing(words: list[str], meant: str) -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=f"did you mean '/reflect {meant}'"):
        call_command("reflect", *words)
    assert not Lesson.objects.exists()


def test_a_manual_reflect_lesson_is_audited_and_lesson_forces_one() -> None:
    from django.core.management import call_command

    from lessonboard.models import AuditEvent

    call_command("reflect", "Always", "run", "migrations", "before", "deploying")
    call_command("reflect", "--lesson", "faild")
    texts = sorted(Lesson.objects.values_list("situation", flat=True))
    assert texts == ["Always run migrations before deploying", "faild"]
    events = AuditEvent.objects.filter(action="lesson.create")
    assert sorted(int(e.object_ids[0]) for e in events) == sorted(Lesson.objects.values_list("pk", flat=True))
    assert all(e.result["via"] == "cli" for e in events)


# --- the other paths scoped ---------------------------------------------------------------------------------
def test_a_refine_run_and_an_agents_mode_belong_to_their_workspace(settings: Any) -> None:
    from refine.models import AgentRefineMode, RefineRun

    a, b = bound("ws-a"), bound("ws-b")
    settings.REFINE_ENABLED = False  # the run is recorded as skipped: nothing is queued
    started = b.post("/api/v1/refine", {"task": "write a haiku", "draft": "secret draft of b", "workspace": "ws-b"})
    assert started.status_code == 200, started.json()
    run_id = started.json()["id"]
    assert RefineRun.objects.get(pk=run_id).workspace.slug == "ws-b"  # type: ignore[union-attr]
    theirs = a.get(f"/api/v1/refine/{run_id}")
    assert (theirs.status_code, theirs.json()["field"]) == (404, "id")
    assert "secret draft" not in theirs.content.decode()
    assert b.get(f"/api/v1/refine/{run_id}").status_code == 200
    unscoped = a.post("/api/v1/refine", {"task": "t", "draft": "d"})
    assert (unscoped.status_code, unscoped.json()["field"]) == (400, "workspace")

    # Modes: ws-a turning "coder" off does not touch ws-b's "coder".
    assert b.post("/api/v1/refine/mode", {"agent": "coder", "mode": "on", "workspace": "ws-b"}).status_code == 200
    assert a.post("/api/v1/refine/mode", {"agent": "coder", "mode": "off", "workspace": "ws-a"}).status_code == 200
    refused = a.post("/api/v1/refine/mode", {"agent": "coder", "mode": "off", "workspace": "ws-b"})
    assert (refused.status_code, refused.json()["field"]) == (403, "workspace")
    assert b.get("/api/v1/refine/mode", {"agent": "coder", "workspace": "ws-b"}).json()["mode"] == "on"
    assert a.get("/api/v1/refine/mode", {"agent": "coder", "workspace": "ws-a"}).json()["mode"] == "off"
    modes = {(m.workspace.slug, m.agent): m.mode for m in AgentRefineMode.objects.all()}  # type: ignore[union-attr]
    assert modes == {("ws-a", "coder"): "off", ("ws-b", "coder"): "on"}
    # A workspace not made yet has no modes: reading one is auto, not the workspace-less pool's mode.
    from refine import runs

    runs.set_mode("coder", "on")  # the pool's
    unbound = ApiClient(issue_token("any", ["full"]).plaintext)
    assert unbound.get("/api/v1/refine/mode", {"agent": "coder", "workspace": "not-yet"}).json()["mode"] == "auto"
    assert unbound.get("/api/v1/refine/mode", {"agent": "coder"}).json()["mode"] == "on"


def test_a_bound_token_cannot_write_into_the_workspace_less_pool() -> None:
    a = bound("ws-a")
    for path, body in (
        (LESSONS, {"text": "Pool lesson."}),
        (LESSONS, {"situation": "s", "correction": "c"}),
        (TRIGGERS, FAILURE),
        (TRIGGERS, {"Task": "t", "Trigger": "error"}),
    ):
        response = a.post(path, body)
        assert (response.status_code, response.json()["field"]) == (400, "workspace"), (path, body)
    assert not Lesson.objects.exists() and not Job.objects.exists()
    # An unbound token still may.
    assert ApiClient(issue_token("ops", ["full"]).plaintext).post(LESSONS, {"text": "Pool lesson."}).status_code == 201


def test_usefulness_baselines_are_per_workspace_and_an_exact_zero_is_not_flagged(settings: Any) -> None:
    from lessons.models import Lesson as L
    from lessons.store import persist_lesson
    from lessons.usage.models import LessonUsage, Retrieval, Served
    from lessons.usage.outcomes import refresh_usage

    settings.USEFULNESS_MIN_SAMPLES = 5
    settings.USEFULNESS_FLAG_FAILURE_RATE = 0.5
    ws_b = WorkspaceFactory(slug="ws-b")
    lesson = persist_lesson(
        situation="b's lesson", mistake="", correction="c", tags=[], trigger="manual", workspace=ws_b
    ).lesson

    def served(workspace: str, success: bool, *, serve: bool = True) -> None:
        row = Retrieval.objects.create(task="t", agent="coder", workspace=workspace, k=5, success=success)
        if serve:
            Served.objects.create(retrieval=row, lesson=lesson, rank=1, score=1.0)

    # In ws-b, "coder" succeeds 2 of 5 and so do the lesson's tasks: usefulness exactly 0 (summed naively
    # it is -4.4e-17), so not flagged though 3 of 5 failed.
    for ok in (False, False, False, True, True):
        served("ws-b", ok)
    # ws-a reports many failures under the same agent name: not ws-b's baseline.
    for _ in range(20):
        served("ws-a", False, serve=False)
    refresh_usage([lesson.pk])
    usage = LessonUsage.objects.get(lesson=lesson)
    assert usage.usefulness == 0.0 and usage.flagged is False
    assert L.objects.filter(pk=lesson.pk).exists()


def test_the_query_vector_cache_is_per_workspace(settings: Any) -> None:
    from lessons import retrieval

    class Fake:
        model_id = "fake"

        def embed_query(self, text: str) -> list[float]:
            return [1.0]

    cache = retrieval.QueryVectors(10)
    assert cache.get(Fake(), "deploy to prod", "ws-b") == ([1.0], False)  # type: ignore[arg-type]
    assert cache.get(Fake(), "deploy to prod", "ws-a")[1] is False  # type: ignore[arg-type]
    assert cache.get(Fake(), "deploy to prod", "ws-b")[1] is True  # type: ignore[arg-type]


def test_common_terms_come_from_the_workspaces_own_lessons(settings: Any) -> None:
    from lessons import retrieval
    from lessons.store import persist_lesson

    settings.RETRIEVAL_PRUNE_FROM_ROWS = 3
    settings.RETRIEVAL_COMMON_SHARE = 0.5
    retrieval.reset_term_stats()
    ws_a, ws_b = WorkspaceFactory(slug="ws-a"), WorkspaceFactory(slug="ws-b")
    words = ("alpha", "bravo", "charlie", "delta")
    for word in words:  # dedupe=False: near-duplicate texts stay four lessons
        common = {"tags": [], "trigger": "m", "mistake": "", "dedupe": False}
        persist_lesson(situation=f"kubernetes {word}", correction=word, workspace=ws_b, **common)  # type: ignore[arg-type]
        persist_lesson(situation=f"invoice {word}", correction=word, workspace=ws_a, **common)  # type: ignore[arg-type]
    try:
        _, left_out_b = retrieval.text_terms("kubernetes invoice", workspace="ws-b")
        _, left_out_a = retrieval.text_terms("kubernetes invoice", workspace="ws-a")
    finally:
        retrieval.reset_term_stats()
    assert "kubernetes" in left_out_b and "invoice" not in left_out_b  # the task's words, as the explanation says
    assert "invoice" in left_out_a and "kubernetes" not in left_out_a
