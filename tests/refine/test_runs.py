"""Runs: modes and preconditions at start, execution with every pass recorded, choosing the output."""

import pytest

from lessonboard.llm import TransientLLMError
from lessonboard.models import AuditEvent
from refine import runs
from refine.models import AgentRefineMode, RefineMode, RefineRun, RunStatus
from tests.support.refine import ORIGINAL, PASS_1, make_run, reply

pytestmark = pytest.mark.django_db


def test_it_skips_when_the_agent_mode_is_off():
    runs.set_mode("Coder", RefineMode.OFF)
    run = runs.start_run(task="t", draft=ORIGINAL, agent="coder")
    assert run.status == RunStatus.SKIPPED and run.final_output == ORIGINAL
    assert "off for agent 'coder'" in run.skip_reason


def test_it_skips_short_drafts_and_excluded_agents():
    short = runs.start_run(task="t", draft="too short", agent="coder")
    assert short.status == RunStatus.SKIPPED and "below the minimum of 200" in short.skip_reason
    excluded = runs.start_run(task="t", draft=ORIGINAL, agent="formatter")
    assert excluded.status == RunStatus.SKIPPED and "exclude" in excluded.skip_reason


def test_it_follows_the_global_switch_in_auto_mode(settings):
    settings.REFINE_ENABLED = False
    run = runs.start_run(task="t", draft=ORIGINAL, agent="coder")
    assert run.status == RunStatus.SKIPPED and "LESSONBOARD_REFINE_ENABLED" in run.skip_reason
    runs.set_mode("coder", RefineMode.ON)
    assert runs.start_run(task="t", draft=ORIGINAL, agent="coder").status == RunStatus.QUEUED


def test_it_consumes_once_mode_on_the_next_run(settings):
    settings.REFINE_ENABLED = False
    runs.set_mode("coder", RefineMode.ONCE)
    assert runs.start_run(task="t", draft=ORIGINAL, agent="coder").status == RunStatus.QUEUED
    assert AgentRefineMode.objects.mode_for("coder") == RefineMode.AUTO
    assert runs.start_run(task="t", draft=ORIGINAL, agent="coder").status == RunStatus.SKIPPED


def test_it_records_every_pass_and_rolls_back(rolled_back_run):
    run = rolled_back_run
    assert run.status == RunStatus.DONE and run.rolled_back and not run.converged
    assert run.final_output == PASS_1 and run.output_pass == 1
    assert run.outcome == "rolled back"
    assert run.metadata["refine_rolled_back"] == "true" and run.metadata["refine_low_quality"] == "true"
    passes = list(run.passes.all())
    assert [p.decision for p in passes] == ["continue", "rolled_back"]
    assert passes[0].critique_bullets == ["say --atomic so a failed upgrade undoes itself", "name the probes"]
    assert passes[0].scores["original"]["char"]["similarity"] > 0.3
    assert passes[1].similarity_to_original < 0.85 * passes[0].best_similarity
    assert run.pass_count == 2 and run.prompt_tokens == 20 and run.completion_tokens == 10


def test_it_converges_and_stops_early():
    run = make_run(reply(PASS_1), reply(PASS_1), reply("never asked"))
    assert run.converged and run.pass_count == 2 and run.final_output == PASS_1
    assert run.passes.get(number=2).decided_by == "char"


def test_it_fails_the_run_when_the_first_pass_errors():
    run = make_run(TransientLLMError("LLM endpoint answered 503: busy"))
    assert run.status == RunStatus.FAILED and run.final_output == ORIGINAL and "503" in run.error
    assert run.outcome == "failed"


def test_it_does_not_run_a_finished_run_twice(rolled_back_run):
    assert runs.execute_run(rolled_back_run.pk) is None
    assert rolled_back_run.passes.count() == 2


def test_it_lets_a_person_choose_another_pass_as_the_output(rolled_back_run, alice):
    runs.choose_output(rolled_back_run, 0, user=alice)
    run = RefineRun.objects.get(pk=rolled_back_run.pk)
    assert run.final_output == ORIGINAL and run.output_pass == 0 and run.output_chosen_by == alice
    event = AuditEvent.objects.get(action="refine.choose_output")
    assert event.result == {"output_pass": 0, "previous_output_pass": 1}


def test_it_runs_the_pass_loop_through_the_gateway(fake_openai):
    fake_openai.script(reply(PASS_1, "- be precise"), "no tags at all, just prose that replaces the draft")
    run = RefineRun.objects.create(task="deploy", original_draft=ORIGINAL, agent="coder", max_passes=2)
    run = runs.execute_run(run.pk)
    assert run is not None and run.pass_count == 2
    second = run.passes.get(number=2)
    assert not second.protocol_ok and second.revised == "no tags at all, just prose that replaces the draft"
    user = fake_openai.chat_requests()[0].json["messages"][1]["content"]
    assert user.startswith("TASK:\ndeploy\n\nDRAFT:\n") and ORIGINAL in user


def _metric(client, line_start):
    for line in client.get("/metrics").content.decode().splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_it_counts_runs_and_passes_in_prometheus(client_as, carol):
    client = client_as(carol)
    runs_before = _metric(client, 'lessonboard_refine_runs_total{outcome="rolled back"}')
    passes_before = _metric(client, 'lessonboard_refine_passes_total{decided_by="jaccard",decision="continue"}')
    make_run(reply(PASS_1, "- x"), reply("something else entirely, nothing like the draft at all"))
    assert _metric(client, 'lessonboard_refine_runs_total{outcome="rolled back"}') == runs_before + 1
    assert (
        _metric(client, 'lessonboard_refine_passes_total{decided_by="jaccard",decision="continue"}')
        == passes_before + 1
    )


def test_it_keeps_a_run_queued_and_says_so_while_no_llm_is_configured(settings):
    from refine.tasks import run_refine

    settings.LLM_BASE_URL = ""
    run = RefineRun.objects.create(task="t", original_draft=ORIGINAL, agent="coder")
    assert run_refine(run.pk) == "waiting for an LLM"
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED and run.error.startswith("waiting: no LLM configured")


def test_it_finds_stalled_runs_for_the_sweep():
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    old_queued = RefineRun.objects.create(task="t", original_draft="d", created_at=now - timedelta(minutes=3))
    RefineRun.objects.create(task="t", original_draft="d", created_at=now)
    dead_worker = RefineRun.objects.create(
        task="t", original_draft="d", status=RunStatus.RUNNING, started_at=now - timedelta(minutes=11)
    )
    RefineRun.objects.create(task="t", original_draft="d", status=RunStatus.RUNNING, started_at=now)
    RefineRun.objects.create(task="t", original_draft="d", status=RunStatus.DONE, created_at=now - timedelta(hours=1))
    stalled = RefineRun.objects.stalled(
        queued_before=now - timedelta(minutes=2), running_before=now - timedelta(minutes=10)
    )
    assert set(stalled.values_list("pk", flat=True)) == {old_queued.pk, dead_worker.pk}


def test_it_marks_the_run_failed_when_something_other_than_the_refiner_breaks():
    class BrokenChecker:
        def check(self, a, b):
            raise ZeroDivisionError("a bug")

    from refine.refiner import Refiner
    from tests.support.refine import ScriptedLLM

    run = RefineRun.objects.create(task="t", original_draft=ORIGINAL, agent="coder")
    with pytest.raises(ZeroDivisionError):
        runs.execute_run(run.pk, refiner=Refiner(ScriptedLLM(reply(PASS_1))), checker=BrokenChecker())
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "a bug" in run.error and run.final_output == ORIGINAL


def test_it_refuses_to_start_with_an_embedder_that_cannot_be_imported(settings):
    from refine.checks import check_embedder

    settings.REFINE_CONVERGENCE_EMBEDDING = True
    settings.REFINE_EMBEDDER = "refine.nowhere:embed"
    errors = check_embedder()
    assert [e.id for e in errors] == ["refine.E001"] and "LESSONBOARD_REFINE_EMBEDDER" in errors[0].msg
    settings.REFINE_EMBEDDER = "llm"
    assert check_embedder() == []


def test_the_default_embedder_is_the_local_offline_model(settings):
    from refine.convergence import cosine
    from refine.embedder import resolve_embedder

    settings.REFINE_EMBEDDER = "local"
    settings.EMBEDDING_PROVIDER = "local"
    embed = resolve_embedder()
    a, b, c = embed(["Use apply_patch for large file edits.", "Edit big files with apply_patch.", "Bake bread."])
    assert len(a) == settings.EMBEDDING_DIMENSIONS
    assert cosine(a, b) > cosine(a, c)
