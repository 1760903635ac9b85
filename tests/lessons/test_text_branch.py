"""The full-text branch ranks its bounded candidates in one pass: best cover density first, at most
``depth`` rows, the filters applied inside the bound (lessons/retrieval.py ``text_branch``)."""

from __future__ import annotations

import re

import pytest

from lessons import retrieval
from lessons.models import Lesson
from lessons.store import persist_lesson
from tests.factories import WorkspaceFactory

pytestmark = pytest.mark.django_db


def add(situation: str, correction: str, **kw) -> Lesson:
    return persist_lesson(
        situation=situation, mistake="it went wrong", correction=correction, tags=["t"], trigger="error", **kw
    ).lesson


def test_it_returns_the_best_cover_density_first_and_at_most_depth_rows() -> None:
    once_old = add("the nightly Go build stopped with ENOSPC", "delete old artefacts from the runner")
    twice = add("ENOSPC ENOSPC while the docker layers were written", "clean up ENOSPC sources first")
    once_new = add("postgres refused writes: ENOSPC on the data volume", "grow the volume before vacuum")
    rows = retrieval.text_branch("ENOSPC", Lesson.objects.active(), 20)
    assert [pk for pk, _ in rows] == [twice.pk, once_new.pk, once_old.pk]
    assert rows[0][1] > rows[1][1] and rows[1][1] >= rows[2][1]
    assert [pk for pk, _ in retrieval.text_branch("ENOSPC", Lesson.objects.active(), 1)] == [twice.pk]


def test_the_filters_narrow_the_candidates_before_the_bound(settings) -> None:
    ws = WorkspaceFactory(slug="alpha")
    for n in range(3):
        add(f"ENOSPC on runner {n} of the shared pool", f"prune runner {n}")
    scoped = add("ENOSPC on the alpha build box", "prune the alpha box", workspace=ws)
    settings.RETRIEVAL_TEXT_CANDIDATES = 1
    base = retrieval.Filters(workspace="alpha").apply(Lesson.objects.all())
    assert [pk for pk, _ in retrieval.text_branch("ENOSPC", base, 20)] == [scoped.pk]


def test_it_finds_code_like_tokens_whole_and_in_parts() -> None:
    openssl = add("webpack build on Node 18 failed with ERR_OSSL_EVP_UNSUPPORTED", "set NODE_OPTIONS for the build")
    vite = add("import.meta.env.VITE_API_URL was undefined in production", "prefix the variable with VITE_")
    npe = add("the Java service threw NullPointerException at start", "check the config bean")
    flag = add("tsc ran out of heap", "raise --max-old-space-size=4096 for the type check")
    base = Lesson.objects.active()

    def first(task: str) -> int:
        return retrieval.text_branch(task, base, 5)[0][0]

    assert first("ERR_OSSL_EVP_UNSUPPORTED") == openssl.pk  # whole
    assert first("evp unsupported") == openssl.pk  # snake parts
    assert first("VITE_API_URL is empty") == vite.pk  # a dotted path's segment
    assert first("null pointer exception") == npe.pk  # camelCase parts
    assert first("max-old-space-size") == flag.pk  # a flag
    lexemes = {lex for term in retrieval.analyse_terms("os.environ['DATABASE_URL']")[0] for lex in term.lexemes}
    assert {"os.environ", "database_url", "database", "url"} <= lexemes


def analysed() -> None:
    """The full-text branch's idf comes from the planner statistics: analyse the lessons just added."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE lessons_lesson")
    retrieval.reset_term_stats()


def test_it_ors_at_most_the_rarest_terms_of_the_cap_and_names_those_it_dropped(settings) -> None:
    for n in range(6):
        add(f"deploy service {n} with the pipeline", f"check the pipeline step {n}")
    rare = add("deploy service with the pipeline failed on ZX81FAULT", "restart the pipeline runner")
    analysed()
    settings.RETRIEVAL_MAX_TERMS = 2
    settings.EMBEDDING_PROVIDER = "none"
    result = retrieval.search("deploy the service with the pipeline: ZX81FAULT again", k=3)
    dropped = result.explanation["text_terms_over_cap"]
    assert dropped["cap"] == 2 and "2 rarest" in dropped["reason"]
    assert {"deploy", "pipeline"} & set(dropped["dropped"])
    assert "zx81fault" in result.explanation["text_terms"]  # the rarest is kept
    assert result.hits[0].lesson == rare
    retrieval.reset_term_stats()


def test_the_workspace_filter_is_applied_inside_the_full_text_index_scan() -> None:
    from django.db import connection

    ws = WorkspaceFactory(slug="beta")
    add("ENOSPC on the beta runner", "prune it", workspace=ws)
    terms, _ = retrieval.analyse_terms("ENOSPC")
    base = retrieval.Filters(workspace="beta").apply(Lesson.objects.all())
    query = base.extra(where=["lessons_lesson.term_vector @@ %s::tsquery"], params=["'enospc'"]).values("id")
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        # Only the (workspace, term_vector) GIN index left to the planner (the test's transaction undoes it).
        cursor.execute(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = 'lessons_lesson'::regclass "
            "AND NOT indisunique AND indexrelid::regclass::text <> 'lesson_terms_ws_gin'"
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f"DROP INDEX {name}")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "lesson_terms_ws_gin" in plan
    index_cond = [line for line in plan.splitlines() if "Index Cond" in line]
    assert any("workspace_id" in line and "term_vector" in line for line in index_cond), plan
    assert terms and [pk for pk, _ in retrieval.text_branch("ENOSPC", base, 5)]


def test_the_tags_branch_compares_at_most_the_configured_number_of_candidate_tags(settings) -> None:
    go = persist_lesson(situation="a", mistake="b", correction="c", tags=["golang"], trigger="error").lesson
    k8s = persist_lesson(situation="d", mistake="e", correction="f", tags=["kubernetes"], trigger="error").lesson
    base = Lesson.objects.active()
    assert {pk for pk, _ in retrieval.tag_branch("golang service on kubernetes", base, 5)} == {go.pk, k8s.pk}
    settings.RETRIEVAL_MAX_TAG_CANDIDATES = 1  # the task's first word only
    assert [pk for pk, _ in retrieval.tag_branch("golang service on kubernetes", base, 5)] == [go.pk]


def test_the_tags_branch_reads_through_the_tags_index_and_puts_the_planner_back() -> None:
    """With a bound, the planner may walk every row of the workspace filtering tags, betting that matches
    come early; when none match (rare words as tags) that read the whole workspace (200,000 rows: ~1 s).
    The branch's query is a bitmap scan, and the settings that make it so do not outlive it."""
    from django.db import connection, transaction

    ws = WorkspaceFactory(slug="tagged")
    go = persist_lesson(situation="a", mistake="b", correction="c", tags=["golang"], trigger="e", workspace=ws).lesson
    base = retrieval.Filters(workspace="tagged").apply(Lesson.objects.all())
    plans: list[str] = []

    def explain(execute, sql, params, many, context):
        if '"tags" &&' in sql and not sql.startswith("EXPLAIN"):
            context["cursor"].execute(f"EXPLAIN {sql}", params)
            plans.append("\n".join(row[0] for row in context["cursor"].fetchall()))
        return execute(sql, params, many, context)

    with transaction.atomic(), connection.execute_wrapper(explain):
        assert [pk for pk, _ in retrieval.tag_branch("golang w12345 zq999x", base, 5)] == [go.pk]
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('enable_indexscan'), current_setting('enable_seqscan')")
            assert cursor.fetchone() == ("on", "on")
    (plan,) = plans
    # A bitmap scan (its cost counts every match before the first row, so the bound buys no bet), never
    # an ordered walk or a sequential scan of lessons that tests each row's tags.
    scans = [line.strip() for line in plan.splitlines() if re.search(r"Scan on lessons_lesson\s", line)]
    assert scans and all(line.startswith("->  Bitmap Heap Scan") for line in scans), plan


def test_a_rare_terms_lessons_are_scored_even_when_a_common_word_fills_the_candidate_bound(settings) -> None:
    """Below RETRIEVAL_PRUNE_FROM_ROWS no word is left out as common, so one word many lessons have could fill
    the RETRIEVAL_TEXT_CANDIDATES bound in the order the scan met them, and the one lesson with the task's
    error code — saved last — was not scored at all. The rarest terms' lessons are read first."""
    subjects = (
        "docker image", "gradle wrapper", "webpack bundle", "rust crate", "maven site", "terraform plan",
        "helm chart", "xcode archive", "cmake preset", "bazel target", "sbt assembly", "nuget package",
    )  # fmt: skip
    for n, subject in enumerate(subjects):  # unlike each other, or they would be near duplicates of one
        add(f"the {subject} build stopped with an error", f"pin the {subject} toolchain version {n}")
    code = add("the build failed with error E0382 after the refactor", "clone the value before the move")
    analysed()
    settings.RETRIEVAL_TEXT_CANDIDATES = 5
    rows = retrieval.text_branch("build error E0382", Lesson.objects.active(), 5)
    assert rows[0][0] == code.pk
    assert len(rows) == 5  # the bound still holds: the rest are common-word lessons
    retrieval.reset_term_stats()
