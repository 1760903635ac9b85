"""Ingest: trigger detection (docs/compat/chatcli.md#triggers), the API and ``enqueue`` (WAL first, then the row)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lessonq.ingest import AgentResult, LessonRequest, detect
from lessonq.models import Job, JobState
from lessonq.paths import wal
from lessonq.wal import MAX_PAYLOAD

URL = "/api/v1/reflexion/triggers"


def test_it_detects_triggers_in_chatcli_order(settings: Any) -> None:
    r = detect(AgentResult(task="t", output="o", error="boom", metadata={"verified_with_discrepancy": "true"}))
    assert r == LessonRequest(task="t", attempt="o", outcome="ERROR: boom", trigger="error")
    r = detect(AgentResult(task="t", metadata={"verified_with_discrepancy": "true", "verifier_discrepancies": "d"}))
    assert r is not None and (r.trigger, r.outcome) == ("hallucination", "DISCREPANCY (from CoVe): d")
    r = detect(AgentResult(task="t", error="e", metadata={"force_reflexion": "true"}))
    assert r is not None and (r.trigger, r.outcome) == ("manual", "ERROR: e")
    assert (
        detect(AgentResult(task="t", metadata={"force_reflexion": "true"})).outcome == "MANUAL: user requested /reflect"
    )  # type: ignore[union-attr]
    assert detect(AgentResult(task="t", metadata={"verified_with_discrepancy": "TRUE"})) is None
    assert detect(AgentResult(task="t", metadata={"refine_low_quality": "true"})) is None  # off by default
    settings.LESSONQ_ON_LOW_QUALITY = True
    r = detect(AgentResult(task="t", metadata={"refine_low_quality": "true", "refine_low_quality_reason": "meh"}))
    assert r is not None and (r.trigger, r.outcome) == ("low_quality", "LOW QUALITY (from Self-Refine): meh")
    settings.LESSONQ_ON_ERROR = False
    assert detect(AgentResult(task="t", error="e")) is None


@pytest.mark.django_db
def test_it_accepts_a_trigger_into_the_wal_and_the_database(
    api: Any, queue_dir: Path, fake_openai: Any, settings: Any
) -> None:
    body = {
        "task": "Edit main.go",
        "output": "used full rewrite",
        "error": "file too large",
        "agent": "coder",
        "workspace": "proj-a",
    }
    response = api.post(URL, body)
    assert response.status_code == 202
    # chatcli's JobID of this request is bba86ebf380b9dbc; in a workspace the slug is one more input of
    # the dedupe key (docs/queue.md#dedupe-per-workspace), so the same failure elsewhere is another job.
    assert response.json() == {"job_id": "080045c5d13e176e", "status": "accepted"}
    record = wal().read("080045c5d13e176e")
    assert record is not None and (record.task, record.attempt, record.outcome, record.trigger) == (
        "Edit main.go",
        "used full rewrite",
        "ERROR: file too large",
        "error",
    )
    job = Job.objects.get(pk="080045c5d13e176e")
    assert (job.state, job.agent, job.workspace.slug) == ("pending", "coder", "proj-a")  # type: ignore[union-attr]
    assert job.chatcli_job_id == "bba86ebf380b9dbc"
    assert job.node == settings.LESSONQ_QUEUE and job.dispatched_at is not None
    assert job.agent_token is not None and job.agent_token.name == "test-agent"


@pytest.mark.django_db
def test_it_dedupes_a_repeat(api: Any, queue_dir: Path) -> None:
    body = {"task": "t", "error": "e"}
    first = api.post(URL, body).json()
    second = api.post(URL, body)
    assert second.status_code == 202 and second.json() == {"job_id": first["job_id"], "status": "deduped"}
    assert Job.objects.count() == 1 and wal().count() == 1


@pytest.mark.django_db
def test_it_accepts_chatclis_raw_request(api: Any, queue_dir: Path) -> None:
    response = api.post(URL, {"Task": "x", "Attempt": "y", "Outcome": "z", "Trigger": "  ERROR "})
    assert response.status_code == 202 and response.json()["job_id"] == "b49a3667761dba11"


@pytest.mark.django_db
def test_it_answers_no_trigger(api: Any, queue_dir: Path) -> None:
    response = api.post(URL, {"task": "t", "output": "fine"})
    assert response.status_code == 200 and response.json() == {"status": "no_trigger"}
    assert Job.objects.count() == 0 and wal().count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"output": "o", "error": "e"}, "task"),
        ({"task": 3, "error": "e"}, "task"),
        ({"task": "t", "error": ["e"]}, "error"),
        ({"task": "t", "metadata": "x"}, "metadata"),
        ({"task": "t", "metadata": {"force_reflexion": 1}}, "metadata.force_reflexion"),
        ({"task": "t", "error": "e", "workspace": "Not A Slug"}, "workspace"),
        ({"Task": "t", "Trigger": "whatever"}, "Trigger"),
    ],
)
def test_it_names_the_bad_field(api: Any, queue_dir: Path, body: dict[str, Any], field: str) -> None:
    response = api.post(URL, body)
    assert response.status_code == 400 and response.json()["field"] == field
    assert Job.objects.count() == 0 and wal().count() == 0


@pytest.mark.django_db
def test_it_rejects_bad_json_and_missing_tokens_but_takes_ingest_tokens(
    api: Any, agent_token: Any, queue_dir: Path
) -> None:
    from tests.support.clients import ApiClient

    assert api.post(URL, raw="{nope").json()["field"] == "body"
    assert ApiClient("lb_nope_nope").post(URL, {"task": "t", "error": "e"}).status_code == 401
    assert ApiClient(agent_token("ing", "ingest")).post(URL, {"task": "t", "error": "e"}).status_code == 202
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_it_answers_413_over_16_mib(api: Any, queue_dir: Path) -> None:
    response = api.post(URL, {"task": "t", "error": "e", "output": "x" * MAX_PAYLOAD})
    assert response.status_code == 413 and response.json()["field"] == "output"
    assert wal().count() == 0 and Job.objects.count() == 0


@pytest.mark.django_db
def test_it_takes_a_large_output_whole(api: Any, queue_dir: Path) -> None:
    output = "<&>\u2028" + "é" * 200_000
    job_id = api.post(URL, {"task": "t", "error": "e", "output": output}).json()["job_id"]
    assert wal().read(job_id).attempt == output  # type: ignore[union-attr]
    assert Job.objects.get(pk=job_id).output == output


@pytest.mark.django_db
def test_it_waits_visibly_without_an_llm(api: Any, queue_dir: Path, settings: Any) -> None:
    settings.LLM_BASE_URL = ""
    job_id = api.post(URL, {"task": "t", "error": "e"}).json()["job_id"]
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.PENDING and job.dispatched_at is None
    assert "no LLM configured" in job.waiting_reason


@pytest.mark.django_db(transaction=True)
def test_it_answers_202_while_the_jobs_table_is_unavailable_and_the_row_appears_later(
    api: Any, queue_dir: Path, fake_openai: Any
) -> None:
    """The WAL append is the durable point: a database failing after it still answers 202, and the
    sweeper adopts the record once the database is back."""
    from django.db import connection

    from lessonq import reconcile

    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE queue_job RENAME TO queue_job_away")
    try:
        response = api.post(URL, {"task": "db down", "output": "o", "error": "x"})
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE queue_job_away RENAME TO queue_job")
    assert response.status_code == 202 and response.json()["status"] == "accepted"
    job_id = response.json()["job_id"]
    assert wal().exists(job_id) and not Job.objects.filter(pk=job_id).exists()
    assert reconcile.sweep().adopted == 1
    job = Job.objects.get(pk=job_id)
    assert (job.task, job.state, job.trigger, job.outcome) == ("db down", "pending", "error", "ERROR: x")
    assert job.dispatched_at is not None


def test_a_job_adopted_from_its_record_alone_keeps_its_workspace_agent_and_token(
    db: Any, queue_dir: Path, fake_openai: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bound token's trigger accepted while the jobs table is unavailable is adopted by the sweeper with
    the workspace, agent and token it came with (the record names them), not into the workspace-less pool;
    so is one the sweeper lists between the WAL append and the row (a race, no outage)."""
    from django.db import connection

    from lessonboard.tokens import issue_token
    from lessonq import reconcile
    from tests.factories import WorkspaceFactory
    from tests.support.clients import ApiClient

    WorkspaceFactory(slug="shop")
    issued = issue_token("agent-shop", ["full"], workspaces=["shop"])
    shop = ApiClient(issued.plaintext)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE queue_job RENAME TO queue_job_away")
    try:
        response = shop.post(
            URL, {"task": "db down", "output": "o", "error": "x", "workspace": "shop", "agent": "coder"}
        )
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE queue_job_away RENAME TO queue_job")
    assert response.status_code == 202 and response.json()["status"] == "accepted"
    job_id = response.json()["job_id"]
    assert wal().read(job_id).workspace == "shop"
    assert reconcile.sweep().adopted == 1
    job = Job.objects.get(pk=job_id)
    assert (job.workspace.slug, job.agent, job.agent_token_id) == ("shop", "coder", issued.token.pk)

    # The race: the sweep adopts the record before the ingest's own insert, which then finds the row.
    import lessonq.ingest as ingest

    request = detect(AgentResult(task="raced", output="o", error="x"))
    assert request is not None
    record_seen: list[str] = []
    real_insert = ingest._insert_row

    def insert_after_a_sweep(record: Any, **kwargs: Any) -> Any:
        record_seen.append(record.id)
        assert reconcile.sweep().adopted == 1
        return real_insert(record, **kwargs)

    monkeypatch.setattr(ingest, "_insert_row", insert_after_a_sweep)
    enqueued = ingest.enqueue(request, agent="coder", workspace="shop", token=issued.token)
    assert record_seen == [enqueued.job_id]
    job = Job.objects.get(pk=enqueued.job_id)
    assert (job.workspace.slug, job.agent, job.agent_token_id) == ("shop", "coder", issued.token.pk)


@pytest.mark.django_db(transaction=True)
def test_two_processes_enqueueing_the_same_job_at_once_write_one_record(queue_dir: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    from django.conf import settings

    from tests.support.processes import ROOT, subprocess_env

    go = tmp_path / "go"
    script = (
        "import django, pathlib, threading; django.setup()\n"
        "from lessonq.ingest import LessonRequest, enqueue\n"
        "from lessonq.models import Job; Job.objects.exists()  # connect before the race\n"
        f"go = pathlib.Path({str(go)!r}); tick = threading.Event()\n"
        "while not go.exists(): tick.wait(0.005)\n"
        "print(enqueue(LessonRequest(task='race', attempt='a', outcome='ERROR: x', trigger='error')).status)\n"
    )
    env = subprocess_env(LESSONQ_BASE_DIR=str(queue_dir), LESSONBOARD_NODE=settings.NODE)
    procs = [
        subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    go.write_text("")
    outputs = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outputs == ["accepted", "deduped"]
    assert wal().count() == 1 and Job.objects.count() == 1


@pytest.mark.django_db
def test_it_answers_503_when_the_wal_cannot_be_written(api: Any, queue_dir: Path) -> None:
    (queue_dir / "wal").rmdir()
    (queue_dir / "wal").write_text("not a directory")  # any OSError: disk full, permissions, …
    response = api.post(URL, {"task": "t", "error": "e"})
    assert response.status_code == 503 and "cannot store" in response.json()["error"]
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_it_answers_503_when_the_queue_is_disabled(api: Any, queue_dir: Path, settings: Any) -> None:
    settings.LESSONQ_ENABLED = False
    response = api.post(URL, {"task": "t", "error": "e"})
    assert response.status_code == 503 and "disabled" in response.json()["error"]
    assert wal().count() == 0


@pytest.mark.django_db
def test_it_stores_a_lone_surrogate_as_go_would(api: Any, queue_dir: Path) -> None:
    response = api.post(URL, raw='{"task": "bad \\ud800 text", "error": "e"}')
    assert response.status_code == 202
    job_id = response.json()["job_id"]
    assert job_id == LessonRequest(task="bad \ufffd text", attempt="", outcome="ERROR: e", trigger="error").job_id
    assert wal().read(job_id).task == "bad \ufffd text"  # type: ignore[union-attr]
