"""The learning loop: the retrieval log, outcomes (endpoint and triggers), usefulness against the agent's
baseline, the review flag, knowledge gaps (grouping, page, dismiss), the lesson list's sort and retention."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from lessons.models import Lesson
from lessons.store import persist_lesson
from lessons.tasks import refresh_all_usage
from lessons.usage import gaps
from lessons.usage.log import embed_task, purge_old
from lessons.usage.models import LessonUsage, Retrieval, Served
from tests.support.clients import ApiClient

pytestmark = pytest.mark.django_db


def lesson(situation: str, correction: str, **kwargs: Any) -> Lesson:
    kwargs.setdefault("trigger", "manual")
    kwargs.setdefault("tags", [])
    return persist_lesson(situation=situation, mistake="", correction=correction, **kwargs).lesson


def retrieve(api: ApiClient, task: str, **extra: Any) -> dict[str, Any]:
    response = api.post("/api/v1/lessons/retrieve", {"task": task, **extra})
    assert response.status_code == 200, response.json()
    return response.json()


def test_it_logs_every_retrieval_with_the_lessons_served(api: ApiClient) -> None:
    helm = lesson("deploying with helm", "pass --atomic to helm upgrade", tags=["helm"])
    lesson("writing SQL migrations", "add columns as nullable first", tags=["sql"])
    body = retrieve(api, "helm upgrade of the api chart", k=2, agent="deployer", workspace="")
    row = Retrieval.objects.get(pk=body["retrieval_id"])
    assert (row.task, row.agent, row.k, row.gap) == ("helm upgrade of the api chart", "deployer", 2, False)
    served = list(Served.objects.filter(retrieval=row).order_by("rank"))
    assert [s.lesson_id for s in served] == [item["id"] for item in body["lessons"]]
    assert served[0].lesson_id == helm.pk and served[0].rank == 1
    assert LessonUsage.objects.get(lesson=helm).served == 1


def test_it_names_the_token_as_the_agent_when_none_is_given(agent_token: Any) -> None:
    api = ApiClient(agent_token("ci-bot", "full"))
    body = retrieve(api, "anything at all")
    assert Retrieval.objects.get(pk=body["retrieval_id"]).agent == "ci-bot"


def test_it_records_a_gap_when_nothing_applies(api: ApiClient) -> None:
    lesson("deploying with helm", "pass --atomic", workspace=None)
    body = retrieve(api, "rotate the TLS certificates", workspace="empty-project")
    assert body["lessons"] == []
    assert Retrieval.objects.get(pk=body["retrieval_id"]).gap is True


def test_it_takes_outcome_reports_and_refuses_bad_ones(api: ApiClient, agent_token: Any) -> None:
    lesson("deploying with helm", "pass --atomic")
    pk = retrieve(api, "helm deploy")["retrieval_id"]
    ingest = ApiClient(agent_token("harness", "ingest"))
    response = ingest.post("/api/v1/outcomes", {"retrieval_id": pk, "success": True, "note": "deployed fine"})
    assert response.status_code == 200
    row = Retrieval.objects.get(pk=pk)
    assert (row.success, row.outcome_note) == (True, "deployed fine")
    assert ingest.post("/api/v1/outcomes", {"retrieval_id": pk + 999, "success": True}).status_code == 404
    for body, field in [
        ({"success": True}, "retrieval_id"),
        ({"retrieval_id": "1", "success": True}, "retrieval_id"),
        ({"retrieval_id": True, "success": True}, "retrieval_id"),
        ({"retrieval_id": pk, "success": "yes"}, "success"),
        ({"retrieval_id": pk, "success": False, "note": 5}, "note"),
    ]:
        response = ingest.post("/api/v1/outcomes", body)
        assert response.status_code == 400 and response.json()["field"] == field, body


def test_a_trigger_naming_its_retrieval_is_that_tasks_outcome(api: ApiClient, queue_dir: Any) -> None:
    lesson("deploying with helm", "pass --atomic")
    failed_pk = retrieve(api, "helm deploy of the api")["retrieval_id"]
    fine_pk = retrieve(api, "helm deploy of the worker")["retrieval_id"]
    response = api.post(
        "/api/v1/reflexion/triggers",
        {"task": "helm deploy of the api", "error": "timed out", "retrieval_id": failed_pk},
    )
    assert response.status_code == 202 and response.json()["outcome"] == "failure"
    response = api.post("/api/v1/reflexion/triggers", {"task": "helm deploy of the worker", "retrieval_id": fine_pk})
    assert response.json() == {"status": "no_trigger", "outcome": "success"}
    assert Retrieval.objects.get(pk=failed_pk).success is False
    assert Retrieval.objects.get(pk=fine_pk).success is True
    # An unknown retrieval never costs the trigger: it is queued, and the answer says the outcome was not kept.
    response = api.post("/api/v1/reflexion/triggers", {"task": "t", "error": "e", "retrieval_id": 10**9})
    assert response.status_code == 202 and response.json()["outcome"].startswith("not recorded")
    bad = api.post("/api/v1/reflexion/triggers", {"task": "t", "error": "e", "retrieval_id": "x"})
    assert bad.status_code == 400 and bad.json()["field"] == "retrieval_id"


def _served_and_reported(api: ApiClient, agent: str, task: str, success: bool) -> None:
    pk = retrieve(api, task, agent=agent, k=1)["retrieval_id"]
    assert api.post("/api/v1/outcomes", {"retrieval_id": pk, "success": success}).status_code == 200


def test_usefulness_needs_enough_samples_and_is_measured_against_the_agents_baseline(
    api: ApiClient, settings: Any, client_as: Any, carol: Any
) -> None:
    settings.USEFULNESS_MIN_SAMPLES = 4
    helm = lesson("deploying with helm charts", "pass --atomic to helm upgrade", tags=["helm"])
    for _ in range(3):
        _served_and_reported(api, "deployer", "helm charts deploy", success=True)
    usage = LessonUsage.objects.get(lesson=helm)
    assert (usage.outcomes, usage.successes, usage.usefulness) == (3, 3, None)  # three samples say nothing
    _served_and_reported(api, "deployer", "helm charts deploy", success=True)
    usage.refresh_from_db()
    # Every task of this agent went well: the baseline is 1.0, so the lesson adds nothing measurable.
    assert (usage.outcomes, usage.usefulness) == (4, pytest.approx(0.0))
    detail = client_as(carol).get(f"/lessons/{helm.pk}/").content.decode()
    assert '0.00 <span class="muted" id="usage-baseline">(n=4, agent baseline 1.00)</span>' in detail
    # The same agent fails a lot without this lesson: the lesson now beats its baseline.
    lesson("writing SQL migrations for postgres", "add columns as nullable first", tags=["sql"])
    for _ in range(4):
        _served_and_reported(api, "deployer", "postgres sql migrations", success=False)
    from lessons.usage.outcomes import refresh_usage

    refresh_usage([helm.pk])
    usage.refresh_from_db()
    assert usage.usefulness == pytest.approx(0.5)  # 4 × (1 − 0.5) / 4
    assert usage.baseline == pytest.approx(0.5)  # 4 of the deployer's 8 tasks went well
    assert usage.flagged is False
    detail = client_as(carol).get(f"/lessons/{helm.pk}/").content.decode()
    assert '0.50 <span class="muted" id="usage-baseline">(n=4, agent baseline 0.50)</span>' in detail


def test_a_lesson_followed_by_failures_is_flagged_and_sorts_first(
    api: ApiClient, settings: Any, client_as: Any, carol: Any
) -> None:
    settings.USEFULNESS_MIN_SAMPLES = 3
    bad = lesson("caching personalised API responses", "cache them for an hour at the CDN", tags=["cdn"])
    good = lesson("deploying with helm charts", "pass --atomic to helm upgrade", tags=["helm"])
    for _ in range(3):
        _served_and_reported(api, "web", "cache personalised API responses at the CDN", success=False)
    for _ in range(3):
        _served_and_reported(api, "web", "helm charts deploy", success=True)
    # The agent's baseline moved with the later successes: the periodic refresh catches every lesson up.
    assert LessonUsage.objects.get(lesson=bad).flagged is False
    assert refresh_all_usage() == 2
    usage = LessonUsage.objects.get(lesson=bad)
    assert usage.flagged is True and usage.usefulness is not None and usage.usefulness < 0
    assert LessonUsage.objects.get(lesson=good).flagged is False

    page = client_as(carol).get("/lessons/", {"sort": "flagged", "status": "active"})
    html = page.content.decode()
    assert html.index(f"#{bad.pk}</a>") < html.index(f"#{good.pk}</a>")
    assert "flagged for review" in html
    page = client_as(carol).get("/lessons/", {"sort": "most_useful", "status": "active"})
    html = page.content.decode()
    assert html.index(f"#{good.pk}</a>") < html.index(f"#{bad.pk}</a>")
    detail = client_as(carol).get(f"/lessons/{bad.pk}/").content.decode()
    assert 'id="usage-flag"' in detail and "(n=3, agent baseline 0.50)" in detail  # 3 of the agent's 6 went well


def test_gaps_group_similar_tasks_by_their_vectors(api: ApiClient, client_as: Any, bob: Any) -> None:
    tasks = [
        "rotate the TLS certificates of the ingress",
        "rotate the ingress TLS certificates",
        "renew TLS certificates on the ingress controller",
        "translate the onboarding emails into Portuguese",
    ]
    for task in tasks:
        pk = retrieve(api, task, workspace="empty-project")["retrieval_id"]
        assert embed_task(pk)  # what the embed worker does after the answer
    assert gaps.open_gap_groups() == []  # pages read the maintained groups: none before a refresh
    gaps.refresh()  # what beat (and the embed worker, soon after a gap's vector) runs
    groups = gaps.open_gap_groups()
    counts = sorted(group.count for group in groups)
    assert counts == [1, 3], [(g.task, g.count) for g in groups]
    assert groups[0].task == "renew TLS certificates on the ingress controller"  # the newest names the group

    page = client_as(bob).get("/lessons/gaps/")
    html = page.content.decode()
    assert 'data-gap-count="3"' in html and 'data-gap-count="1"' in html
    assert "Write a lesson for this" in html
    prefilled = client_as(bob).get("/lessons/", {"new": groups[0].task}).content.decode()
    assert ">renew TLS certificates on the ingress controller</textarea>" in prefilled

    ids = ",".join(str(pk) for pk in groups[0].ids)
    response = client_as(bob).post("/lessons/gaps/dismiss", {"ids": ids})
    assert response.status_code == 302
    assert [g.count for g in gaps.open_gap_groups()] == [1]


def test_gaps_embedded_by_another_model_are_embedded_again_and_group_per_model(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    """After the embedding model is switched, a gap's old vector is neither compared with the new model's
    vectors (e5's and MiniLM's are both 384-d) nor left to never close: the refresh queues its task's
    vector again, and once it is there the gap groups with the new ones."""
    from lessons.usage import task_vectors

    tasks = ["rotate the TLS certificates of the ingress", "rotate the ingress TLS certificates"]
    ids = [retrieve(api, task, workspace="empty-project")["retrieval_id"] for task in tasks]
    for pk in ids:
        assert embed_task(pk)
    old = Retrieval.objects.get(pk=ids[0])
    Retrieval.objects.filter(pk=ids[0]).update(embedding_model="another-model")  # the same vector, another model
    sent: list[int] = []
    monkeypatch.setattr(task_vectors.app, "send_task", lambda name, args, queue: sent.append(args[0]))
    with django_capture_on_commit_callbacks(execute=True):
        gaps.refresh(force=True)
    assert sent == [ids[0]]  # queued again, once
    assert sorted(g.count for g in gaps.open_gap_groups()) == [1, 1]  # not compared across models
    with django_capture_on_commit_callbacks(execute=True):
        gaps.refresh(force=True)
    assert sent == [ids[0]]  # not again while the first is on its way
    assert embed_task(ids[0])  # what the embed worker does with it
    assert Retrieval.objects.get(pk=ids[0]).embedding_model == old.embedding_model
    gaps.refresh(force=True)
    assert [g.count for g in gaps.open_gap_groups()] == [2]


def test_only_reviewers_dismiss_gaps(api: ApiClient, client_as: Any, carol: Any) -> None:
    pk = retrieve(api, "rotate the TLS certificates", workspace="empty-project")["retrieval_id"]
    assert client_as(carol).get("/lessons/gaps/").status_code == 200
    assert client_as(carol).post("/lessons/gaps/dismiss", {"ids": str(pk)}).status_code == 403
    assert Retrieval.objects.gaps().filter(pk=pk).exists()


def test_gaps_without_vectors_group_by_identical_text(api: ApiClient) -> None:
    for _ in range(2):
        retrieve(api, "Rotate the  TLS certificates", workspace="empty-project")
    retrieve(api, "something else entirely", workspace="empty-project")
    gaps.refresh()
    assert sorted(g.count for g in gaps.open_gap_groups()) == [1, 2]
    assert [g.count for g in gaps.open_gap_groups(workspace="empty-project")] == [2, 1]
    assert gaps.open_gap_groups(workspace="another-project") == []


def test_a_refresh_while_another_runs_leaves_the_row_to_it(api: ApiClient) -> None:
    """Overlapping refreshes (a beat run longer than its interval) do not repeat the work: the one that
    finds the advisory lock taken returns the row's count and writes nothing."""
    import psycopg
    from django.db import connection

    from lessonboard.models import DerivedState

    retrieve(api, "rotate the TLS certificates", workspace="empty-project")
    assert gaps.refresh() == 1
    retrieve(api, "translate the onboarding emails", workspace="empty-project")  # an input changed
    written = DerivedState.objects.get(pk=gaps.SNAPSHOT).computed_at
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:  # another process
        assert other.execute("SELECT pg_try_advisory_lock(%s)", [gaps.REFRESH_LOCK]).fetchone() == (True,)
        pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        assert gaps.refresh(force=True) == 1
        assert DerivedState.objects.get(pk=gaps.SNAPSHOT).computed_at == written
        # That process dies. Its server session ends after the client has gone, not with it: wait until it
        # has (pg_terminate_backend's timeout), or the next refresh can still find the lock taken.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s, 30000)", [pid])
            assert cursor.fetchone() == (True,)
    assert gaps.refresh() == 2  # the lock went with that process's session


def test_a_gap_dismissed_while_the_groups_were_computed_stays_dismissed(api: ApiClient) -> None:
    """refresh computes, then writes under the row's lock that dismiss takes: a gap a person closed in
    between is not written back into the groups (docs/api.md#limits)."""
    first = retrieve(api, "rotate the TLS certificates", workspace="empty-project")["retrieval_id"]
    second = retrieve(api, "translate the onboarding emails", workspace="empty-project")["retrieval_id"]
    groups, nearest = gaps._grouped(close=True)  # the refresh's computation, before its write
    assert sorted(g.count for g in groups) == [1, 1]
    assert gaps.dismiss([first]) == 1  # meanwhile, a reviewer dismisses one
    assert gaps._store(groups, nearest, {}) == 1
    assert [g.ids for g in gaps.open_gap_groups()] == [[second]]
    assert gaps.refresh() == 1  # and the inputs it stored are the current ones: nothing stale to redo


def test_retention_deletes_old_retrievals_and_keeps_counts(api: ApiClient, settings: Any) -> None:
    settings.RETRIEVAL_LOG_RETENTION = 86400.0
    helm = lesson("deploying with helm", "pass --atomic")
    old = retrieve(api, "helm deploy")["retrieval_id"]
    with time_machine.travel(timezone.now() + timedelta(days=1, seconds=1)):
        new = retrieve(api, "helm deploy again")["retrieval_id"]
        assert purge_old() >= 1
    assert not Retrieval.objects.filter(pk=old).exists()
    assert Retrieval.objects.filter(pk=new).exists()
    assert LessonUsage.objects.get(lesson=helm).served == 2


def test_outcomes_that_left_the_log_leave_the_lessons_scores_too(
    api: ApiClient, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention deletes old retrievals in batches; a lesson's outcomes, usefulness and flag are then over
    the outcomes still in the log — one whose outcomes all left has none (it stayed flagged, first in the
    flagged sort, forever), and its times served stay."""
    from lessons.usage import log

    settings.RETRIEVAL_LOG_RETENTION = 86400.0
    settings.USEFULNESS_MIN_SAMPLES = 1
    monkeypatch.setattr(log, "PURGE_BATCH", 1)  # three retrievals: three batches
    helm = lesson("deploying with helm charts", "pass --atomic to helm upgrade", tags=["helm"])
    _served_and_reported(api, "bot", "deploy the chart with helm", False)
    _served_and_reported(api, "bot", "upgrade the helm release", False)
    other = lesson("writing a csv export", "stream rows, never build the file in memory", tags=["csv"])
    _served_and_reported(api, "bot", "export the orders as csv", True)
    refresh_all_usage()
    assert LessonUsage.objects.get(lesson=helm).flagged is True
    with time_machine.travel(timezone.now() + timedelta(days=1, seconds=1)):
        assert purge_old() >= 3
        refresh_all_usage()
    assert not Retrieval.objects.exists()
    for gone in (helm, other):
        usage = LessonUsage.objects.get(lesson=gone)
        assert (usage.outcomes, usage.successes, usage.usefulness, usage.flagged) == (0, 0, None, False)
    assert LessonUsage.objects.get(lesson=helm).served == 2


def test_the_log_can_be_switched_off(api: ApiClient, settings: Any) -> None:
    settings.RETRIEVAL_LOG = False
    body = retrieve(api, "anything")
    assert body["retrieval_id"] is None
    assert not Retrieval.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_outcome_reports_at_once_both_count_on_the_lesson_they_served(api: ApiClient) -> None:
    """Two reports on different retrievals that served the same lesson: the second waits for the first's
    refresh to commit before it reads the log, so the lesson's counts have both (each refresh writes them
    whole; read side by side, the later write lost the other's outcome)."""
    import threading

    from django.db import connection, connections, transaction

    from lessons.usage.outcomes import report_outcome
    from tests.support.wait import wait_for

    helm = lesson("deploying with helm charts", "pass --atomic to helm upgrade", tags=["helm"])
    first = retrieve(api, "deploy the chart with helm", k=1)["retrieval_id"]
    second = retrieve(api, "upgrade the helm release", k=1)["retrieval_id"]
    assert Served.objects.filter(lesson=helm).count() == 2
    errors: list[BaseException] = []

    def report_second() -> None:
        try:
            report_outcome(second, success=False)
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)
        finally:
            connections.close_all()

    other = threading.Thread(target=report_second)
    with transaction.atomic():
        report_outcome(first, success=True)  # its refresh done, not yet committed
        other.start()
        with connection.cursor() as cursor:  # the second report waits on a lock this transaction holds

            def second_waits() -> bool:  # pg_locks is live (pg_stat_activity is a snapshot per transaction)
                cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid()")
                return bool(cursor.fetchone()[0])

            wait_for(lambda: errors or second_waits(), timeout=30, what="the second report to wait")
            assert not errors, errors
    other.join(timeout=30)
    assert not other.is_alive() and not errors
    usage = LessonUsage.objects.get(lesson=helm)
    assert (usage.outcomes, usage.successes) == (2, 1)
