"""POST /api/v1/refine, GET /api/v1/refine/<id>, the mode endpoint; and full runs through a real worker."""

import uuid

import pytest

from refine import runs
from refine.models import AgentRefineMode, RefineRun, RunStatus
from refine.refiner import Refiner
from tests.fakes.openai_server import Reply
from tests.support.clients import ApiClient
from tests.support.queue import LESSON
from tests.support.refine import ORIGINAL, PASS_1, PASS_2, ScriptedLLM, reply
from tests.support.wait import wait_for


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"draft": ORIGINAL}, "task"),
        ({"task": "t"}, "draft"),
        ({"task": "t", "draft": 42}, "draft"),
        ({"task": "t", "draft": ORIGINAL, "agent": ["x"]}, "agent"),
        ({"task": "t", "draft": ORIGINAL, "max_passes": 0}, "max_passes"),
        ({"task": "t", "draft": ORIGINAL, "max_passes": 11}, "max_passes"),
        ({"task": "t", "draft": ORIGINAL, "max_passes": True}, "max_passes"),
        ({"task": "t", "draft": ORIGINAL, "max_passes": "2"}, "max_passes"),
    ],
)
def test_it_rejects_bad_input_naming_the_field(api, body, field):
    response = api.post("/api/v1/refine", body)
    assert response.status_code == 400 and response.json()["field"] == field
    assert RefineRun.objects.count() == 0


@pytest.mark.django_db
def test_it_rejects_a_body_that_is_not_json(api):
    response = api.post("/api/v1/refine", raw="{nope")
    assert response.status_code == 400 and response.json()["field"] == "body"


@pytest.mark.django_db
def test_it_needs_a_full_token(agent_token):
    assert ApiClient("nope").post("/api/v1/refine", {}).status_code == 401
    ingest = ApiClient(agent_token("ingest-only", "ingest"))
    assert ingest.post("/api/v1/refine", {"task": "t", "draft": ORIGINAL}).status_code == 403


@pytest.mark.django_db
def test_it_answers_a_skipped_run_at_once_with_the_draft(api):
    response = api.post("/api/v1/refine", {"task": "t", "draft": "short draft", "agent": "coder"})
    body = response.json()
    assert response.status_code == 200 and body["status"] == "skipped" and body["output"] == "short draft"
    assert "below the minimum" in body["skip_reason"]


@pytest.mark.django_db
def test_it_answers_202_with_a_poll_url_when_the_run_is_not_done(api, settings):
    settings.REFINE_API_WAIT = 0
    response = api.post("/api/v1/refine", {"task": "t", "draft": ORIGINAL, "agent": "coder", "max_passes": 2})
    body = response.json()
    run = RefineRun.objects.get()
    assert response.status_code == 202 and body["status"] == "queued" and body["output"] is None
    assert response["Location"].endswith(f"/api/v1/refine/{run.pk}") and body["poll_url"] == response["Location"]
    assert run.max_passes == 2 and run.requested_by is not None
    polled = api.get(f"/api/v1/refine/{run.pk}")
    assert polled.status_code == 200 and polled.json()["id"] == run.pk
    assert api.get("/api/v1/refine/999999").status_code == 404


@pytest.mark.django_db
def test_it_sets_and_reads_an_agents_mode(api):
    assert api.get("/api/v1/refine/mode", {"agent": "Coder"}).json() == {"agent": "coder", "mode": "auto"}
    assert api.post("/api/v1/refine/mode", {"agent": "Coder", "mode": "OFF"}).json() == {
        "agent": "coder",
        "mode": "off",
    }
    assert AgentRefineMode.objects.get(agent="coder").mode == "off"
    assert api.post("/api/v1/refine/mode", {"agent": "coder", "mode": "clear"}).json()["mode"] == "auto"
    assert api.post("/api/v1/refine/mode", {"agent": "coder", "mode": "next"}).json()["mode"] == "once"
    bad = api.post("/api/v1/refine/mode", {"agent": "coder", "mode": "sometimes"})
    assert bad.status_code == 400 and bad.json()["field"] == "mode"
    assert api.post("/api/v1/refine/mode", {"mode": "on"}).json()["field"] == "agent"
    assert api.get("/api/v1/refine/mode").json()["field"] == "agent"


# --- through a real worker and the fake OpenAI server --------------------------------------------------------
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_runs_a_refine_in_a_real_worker_and_rolls_back_a_protocol_violation(
    api, celery_worker, test_broker, fake_openai, settings
):
    settings.REFINE_API_WAIT = 0
    # pass 1 follows the protocol; pass 2 breaks it (no <revised>): the whole reply becomes the rewrite,
    # which has drifted so far from the original that the guard rolls back to pass 1.
    fake_openai.script(
        reply(PASS_1, "- say --atomic\n- name the probes"),
        "I cannot help with deployments, but here are some general thoughts about clouds.",
    )
    response = api.post(
        "/api/v1/refine", {"task": "Explain the deploy", "draft": ORIGINAL, "agent": "coder", "max_passes": 3}
    )
    assert response.status_code == 202
    run_id = response.json()["id"]
    body = wait_for(
        lambda: (b := api.get(f"/api/v1/refine/{run_id}").json())["status"] == "done" and b,
        timeout=60,
        what="the worker to finish the refine run",
    )
    assert body["output"] == PASS_1 and body["rolled_back"] and body["outcome"] == "rolled back"
    assert body["metadata"]["refine_rolled_back"] == "true" and body["metadata"]["refine_low_quality"] == "true"
    assert [p["decision"] for p in body["passes"]] == ["continue", "rolled_back"]
    assert [p["protocol_ok"] for p in body["passes"]] == [True, False]
    assert len(fake_openai.chat_requests()) == 2
    run = RefineRun.objects.get(pk=run_id)
    assert run.status == RunStatus.DONE and run.passes.get(number=2).revised.startswith("I cannot help")


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_waits_for_a_quick_run_and_answers_200(api, celery_worker, test_broker, fake_openai, settings):
    settings.REFINE_API_WAIT = 60  # the worker answers well within this; the view polls the row with a deadline
    fake_openai.script(reply(PASS_1), reply(PASS_1))
    response = api.post(
        "/api/v1/refine", {"task": "Explain the deploy", "draft": ORIGINAL, "agent": "coder", "max_passes": 4}
    )
    body = response.json()
    assert response.status_code == 200 and body["status"] == "done"
    assert body["converged"] and body["pass_count"] == 2 and body["output"] == PASS_1


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_run_that_ends_low_quality_queues_its_own_reflexion_job(
    api, celery_worker, test_broker, fake_openai, settings
):
    """End to end: the API starts a run, a real worker refines it through the fake LLM, the run rolls back
    (low quality) and queues the low_quality lesson job itself — the agent forwarded nothing."""
    from lessonq.models import Job

    settings.REFINE_API_WAIT = 0
    settings.LESSONQ_ON_LOW_QUALITY = True  # Reflexion's low_quality trigger is on for this server
    fake_openai.script(
        reply(PASS_1, "- say --atomic\n- name the probes"),
        "I cannot help with deployments, but here are some general thoughts about clouds.",
    )
    fake_openai.default = Reply(text=LESSON)  # the queued low_quality job's own call: a lesson
    # A task of its own: the session worker's WAL outlives the test database, and JobIDs are content-addressed.
    task = f"Explain the deploy {uuid.uuid4().hex[:8]}"
    response = api.post("/api/v1/refine", {"task": task, "draft": ORIGINAL, "agent": "coder", "max_passes": 3})
    run_id = response.json()["id"]
    body = wait_for(
        lambda: (b := api.get(f"/api/v1/refine/{run_id}").json())["status"] == "done" and b,
        timeout=60,
        what="the worker to finish the refine run",
    )
    assert body["metadata"]["refine_low_quality"] == "true"
    job = Job.objects.get(pk=body["reflexion_job"])
    assert (job.trigger, job.agent, job.task) == ("low_quality", "coder", task)
    assert job.outcome.startswith("LOW QUALITY (from Self-Refine): ")
    # The agent forwarding the same metadata as well is the same job, deduplicated.
    again = api.post(
        "/api/v1/reflexion/triggers",
        {"task": task, "output": body["output"], "agent": "coder", "metadata": body["metadata"]},
    )
    assert again.json()["job_id"] == job.pk
    # The session worker runs that job now: let it finish before the test's tables are flushed (a flush
    # racing its writes deadlocked on CI's Redis pass).
    wait_for(
        lambda: Job.objects.get(pk=job.pk).state in ("succeeded", "skipped", "dead"),
        timeout=60,
        what="the low_quality job to finish",
    )


@pytest.mark.django_db
def test_a_low_quality_run_queues_nothing_when_reflexion_is_off(settings):
    from lessonq.models import Job

    settings.LESSONQ_ON_LOW_QUALITY = False
    run = runs.start_run(task="Explain how to deploy", draft=ORIGINAL, agent="coder")
    assert run.reflexion is False
    finished = runs.execute_run(run.pk, refiner=Refiner(ScriptedLLM(reply(PASS_1, "- a"), reply(PASS_2, "- b"))))
    assert finished is not None and finished.low_quality and finished.reflexion_job == ""
    assert not Job.objects.exists()
