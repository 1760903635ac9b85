"""Hybrid retrieval: branches, filters, explanation, HyDE, and the embed task in a real worker."""

import pytest
from django.conf import settings
from django.db import connection

from lessons import retrieval, vectors
from lessons.models import Lesson
from lessons.store import persist_lesson
from tests.factories import WorkspaceFactory
from tests.fakes.openai_server import Reply
from tests.support.wait import wait_for


def add(situation, correction, tags=(), trigger="error", **kw):
    return persist_lesson(
        situation=situation, mistake="it went wrong", correction=correction, tags=list(tags), trigger=trigger, **kw
    ).lesson


@pytest.fixture
def corpus(db):
    # The text branch's idf comes from the planner's statistics of the table. pg_class.reltuples is written
    # in place by ANALYZE (no rollback), so an earlier test's ANALYZE of its own rows, or autovacuum after a
    # committed test, left a row count that is not this corpus's, and a task's rare identifiers were then
    # not rare. Analysing the (empty) table first, inside the test's transaction, sets the row count to 0
    # (the branch then counts the corpus's rows); but ANALYZE of an empty table keeps the columns' old
    # statistics, where "429" could be in every row (a committed test's lessons): delete them too, inside
    # the same transaction (rolled back with it), for the state of a new table.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE lessons_lesson")
        cursor.execute("DELETE FROM pg_statistic WHERE starelid = 'lessons_lesson'::regclass")
    lessons = {
        "rate": add(
            "bulk calls to the payments API",
            "retry HTTP 429 with exponential backoff and jitter",
            ["rate-limit", "429"],
        ),
        "edit": add(
            "editing a very large Go source file",
            "use targeted patch edits instead of rewriting the file",
            ["go", "edit-file"],
        ),
        "git": add("resolving a merge conflict in routes.py", "search for conflict markers before committing", ["git"]),
        "disk": add(
            "CI docker build writes layers",
            "prune docker caches when ENOSPC appears",
            ["disk", "ci"],
            trigger="low_quality",
        ),
    }
    vectors.embed_pending()
    retrieval.reset_term_stats()
    return lessons


@pytest.mark.django_db
def test_it_gives_each_hit_its_branch_ranks_and_the_fused_score(corpus):
    result = retrieval.search(
        "our script hits 429 Too Many Requests from the payments API", k=3, branches=retrieval.BRANCHES
    )
    top = result.hits[0]
    assert top.lesson == corpus["rate"]
    assert top.branches["vector"].rank == 1 and 0 < top.branches["vector"].score <= 1
    assert top.branches["text"].rank == 1
    assert top.branches["tags"].rank == 1 and top.branches["tags"].score == 1.0  # the tag "429"
    # Score fusion (the default with use): cosine + text × the share of the task's idf mass it covers + tags.
    cover = min(top.branches["text"].score / result.explanation["text_idf_mass"], 1.0)
    assert result.explanation["fusion"] == "score"
    text_weight = result.explanation.get("rare_identifiers", {}).get("text_weight", settings.RETRIEVAL_WEIGHT_TEXT)
    assert top.score == pytest.approx(
        top.branches["vector"].score + text_weight * cover + settings.RETRIEVAL_WEIGHT_TAGS * 1.0
    )
    assert result.explanation["rrf_k"] == 60 and result.explanation["hyde"] is None
    assert "429" in result.explanation["terms"]
    assert "payment" in result.explanation["text_terms"]  # stemmed lexemes
    assert retrieval.search("payments", k=1).explanation["branches_run"] == ["text", "vector", "tags"]
    assert top.as_dict()["branches"]["vector"]["rank"] == 1


@pytest.mark.django_db
def test_it_finds_an_exact_identifier_by_keyword(corpus):
    result = retrieval.search("ENOSPC", k=5, branches=("text",))
    assert [hit.lesson for hit in result.hits] == [corpus["disk"]]
    assert set(result.hits[0].branches) == {"text"}


@pytest.mark.django_db
def test_it_narrows_every_branch_with_the_filters(corpus):
    ws = WorkspaceFactory(slug="alpha")
    scoped = add(
        "bulk calls to the billing API", "back off on 429 responses", ["rate-limit"], workspace=ws, agent="bot-1"
    )
    vectors.embed_pending()
    only_ws = retrieval.search("429 rate limit", k=5, filters=retrieval.Filters(workspace="alpha"))
    assert [hit.lesson for hit in only_ws.hits] == [scoped]
    from django.db import connection

    with connection.cursor() as cursor:  # make PostgreSQL walk the HNSW graph even for 5 rows
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN SELECT id FROM lessons_lesson ORDER BY embedding <=> %s::vector LIMIT 5",
            [str([0.1] * settings.EMBEDDING_DIMENSIONS)],
        )
        assert "lesson_embedding_hnsw" in " ".join(row[0] for row in cursor.fetchall())
    vector_only = retrieval.search("429", k=5, filters=retrieval.Filters(workspace="alpha"), branches=("vector",))
    assert [hit.lesson for hit in vector_only.hits] == [scoped]
    by_trigger = retrieval.search("docker build", k=5, filters=retrieval.Filters(trigger="low_quality"))
    assert {hit.lesson for hit in by_trigger.hits} == {corpus["disk"]}
    by_tags = retrieval.search(  # an off-topic task: below the floor, so the floor is off here
        "anything at all", k=5, filters=retrieval.Filters(tags=["go", "edit-file"]), floor=False
    )
    assert [hit.lesson for hit in by_tags.hits] == [corpus["edit"]]
    by_agent = retrieval.search("429", k=5, filters=retrieval.Filters(agent="bot-1"))
    assert [hit.lesson for hit in by_agent.hits] == [scoped]


@pytest.mark.django_db
def test_it_does_not_retrieve_archived_lessons_by_default(corpus):
    Lesson.objects.filter(pk=corpus["rate"].pk).update(status="archived")
    hits = retrieval.search("HTTP 429 backoff", k=5).hits
    assert corpus["rate"] not in [hit.lesson for hit in hits]
    any_status = retrieval.search("HTTP 429 backoff", k=5, filters=retrieval.Filters(status="")).hits
    assert any_status[0].lesson == corpus["rate"]


@pytest.mark.django_db
def test_it_leaves_common_words_out_of_the_full_text_query_of_a_big_table(corpus, settings):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE lessons_lesson")
    settings.RETRIEVAL_PRUNE_FROM_ROWS = 1  # "big" for this test
    settings.RETRIEVAL_COMMON_SHARE = 0.5  # 4 lessons: "error" is in 3 of them
    retrieval.reset_term_stats()
    searched, common = retrieval.text_terms("error in the payments API")
    assert "error" in common
    assert "payment" in searched
    assert retrieval.search("error in the payments API", k=1, branches=("text",)).hits[0].lesson == corpus["rate"]
    # Common words only: full text alone keeps the rarest; next to the vector branch it is skipped.
    assert retrieval.text_terms("error", keep_rarest=True)[0] == ["error"]
    skipped = retrieval.search("error", k=4, floor=False)
    assert skipped.explanation["text_terms"] == [] and all("text" not in hit.branches for hit in skipped.hits)
    retrieval.reset_term_stats()


def test_it_retrieves_lexically_without_an_embedder_and_says_so(corpus, settings):
    settings.EMBEDDING_PROVIDER = "none"
    result = retrieval.search("merge conflict markers", k=3)
    assert result.hits[0].lesson == corpus["git"]
    assert "vector" not in result.hits[0].branches
    assert "lexical" in result.explanation["vector"]


@pytest.mark.django_db
def test_it_embeds_the_llms_hypothetical_lesson_with_hyde_and_records_it(corpus, fake_openai):
    hypothetical = (
        "LESSON: many API calls in a loop\nMISTAKE: retried immediately after HTTP 429\n"
        "CORRECTION: exponential backoff with jitter, honour Retry-After"
    )
    fake_openai.script(Reply(text=hypothetical))
    task = "nightly sync job for the vendor integration"
    plain = retrieval.search(task, k=4, branches=("vector",), floor=False)  # a vague task, below the floor
    hyde = retrieval.search(task, k=4, hyde=True, branches=("vector",))
    assert hyde.explanation["hyde"] == {"text": hypothetical}
    assert hyde.explanation["embedded_text"] == hypothetical
    assert plain.explanation["embedded_text"] == task
    assert hyde.hits[0].lesson == corpus["rate"]
    assert hyde.hits[0].branches["vector"].score != plain.hits[0].branches["vector"].score
    (request,) = fake_openai.chat_requests()
    assert task in request.json["messages"][-1]["content"]


@pytest.mark.django_db
def test_it_falls_back_to_the_query_when_hyde_fails(corpus, fake_openai):
    fake_openai.script(Reply(status=400, error_message="bad request"))
    result = retrieval.search("payments API 429", k=2, hyde=True)
    assert "error" in result.explanation["hyde"]
    assert result.hits[0].lesson == corpus["rate"]


@pytest.mark.django_db
def test_it_embeds_through_the_gateway_with_the_openai_provider(db, fake_openai, settings):
    settings.EMBEDDING_PROVIDER = "openai"
    settings.EMBEDDING_DIMENSIONS = 64  # the fake server's hashed vectors
    vectors.resize_column(64)
    try:
        lesson = add("flaky test with sleep", "poll for the condition", ["flaky-test"])
        assert vectors.embed_pending() == 1
        lesson.refresh_from_db()
        assert lesson.embedding_model == "openai:text-embedding-3-small" and len(lesson.embedding) == 64
        hits = retrieval.search("flaky test sleep", k=1).hits
        assert hits[0].lesson == lesson and "vector" in hits[0].branches
    finally:
        vectors.resize_column(512)
        assert vectors.column_dimensions() == 512


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_fills_vectors_for_new_lessons_in_the_embed_worker(celery_worker):
    lesson = add("deploying with unpinned dependencies", "pin every dependency", ["dependencies"])
    assert lesson.embedding is None

    def embedded():
        lesson.refresh_from_db()
        return lesson.embedding is not None

    wait_for(embedded, timeout=60, what="the embed worker to store a vector")
    assert len(lesson.embedding) == 512 and lesson.embedding_model.startswith("use-multilingual-v3")
    assert lesson.embedded_at is not None


@pytest.mark.django_db
def test_a_lesson_whose_vector_is_not_computed_yet_is_found_by_full_text(corpus):
    # New lessons wait for a shared embed task (lessons.vectors.embed_new); meanwhile the full-text
    # branch finds them (the vector branch only knows lessons with a vector).
    fresh = add("uploading artefacts to the flaky mirror", "verify the checksum after every upload", ["mirror"])
    assert fresh.embedding is None
    query = "the artefact mirror upload checksum failed"
    assert fresh in [hit.lesson for hit in retrieval.search(query, k=3, branches=("text",)).hits]
    assert fresh not in [hit.lesson for hit in retrieval.search(query, k=10, branches=("vector",)).hits]
    # In a workspace whose only lesson has no vector yet the floor cannot run: the answer says so.
    from tests.factories import WorkspaceFactory

    add(
        "rotating the signing keys",
        "publish the new key first",
        ["keys"],
        workspace=WorkspaceFactory(slug="fresh-only"),
    )
    result = retrieval.search("rotate the signing keys", k=3, filters=retrieval.Filters(workspace="fresh-only"))
    assert result.explanation["floor"] == "off: no lesson in the filtered set has a vector of this model yet"
    assert [hit.lesson.situation for hit in result.hits] == ["rotating the signing keys"]


@pytest.mark.django_db(transaction=True)
def test_the_query_embedding_thread_replaces_a_connection_the_database_dropped(fake_openai, settings):
    """The query is embedded in a pool thread; through the gateway that thread reads the LLM breaker on a
    connection of its own. After the database dropped that connection (a restart), the next retrieval
    must still see the breaker: open, so the vector branch is off and says why. A dead connection kept
    would read nothing and call the endpoint as if it were up."""
    import threading

    from django.db import connection
    from django.utils import timezone

    from lessonboard.models import BreakerState, LLMBreaker

    settings.EMBEDDING_PROVIDER = "openai"
    settings.EMBEDDING_DIMENSIONS = 64  # the fake server's hashed vectors
    vectors.resize_column(64)
    try:
        retrieval.search("a first task, embedded in the pool", k=1)
        barrier = threading.Barrier(2)

        def backend_pid() -> int:
            barrier.wait(30)  # both pool threads, each with its own connection
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                return int(cursor.fetchone()[0])

        futures = [retrieval._embedder_pool.submit(backend_pid) for _ in range(2)]
        pids = [future.result(timeout=60) for future in futures]
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(p, 5000)) FROM unnest(%s) AS p", [pids])
            assert cursor.fetchone()[0] == 2
        LLMBreaker.objects.create(
            endpoint=fake_openai.url, state=BreakerState.OPEN, opened_at=timezone.now(), last_error="connection refused"
        )
        before = len(fake_openai.requests)

        result = retrieval.search("a second task, after the database restarted", k=1)

        assert result.explanation["vector"].startswith("off: "), result.explanation
        assert "connection refused" in result.explanation["vector"]
        # The floor did not run either, and the answer says so rather than leaving it out.
        assert result.explanation["floor"].startswith("off: the floor needs the task's vector")
        assert len(fake_openai.requests) == before  # nothing was sent to an endpoint the breaker holds closed
    finally:
        vectors.resize_column(512)


@pytest.mark.django_db
def test_a_task_naming_a_rare_identifier_leans_on_full_text(corpus, settings):
    retrieval.reset_term_stats()
    result = retrieval.search("the nightly batch job got 429 again", k=3)
    assert result.hits[0].lesson == corpus["rate"]
    assert result.explanation["rare_identifiers"]["text_weight"] == settings.RETRIEVAL_WEIGHT_TEXT_EXACT
    plain = retrieval.search("resolve the merge conflict markers", k=3)
    assert "rare_identifiers" not in plain.explanation
    retrieval.reset_term_stats()


@pytest.mark.django_db
def test_a_small_filtered_set_is_ranked_exactly_and_a_big_one_through_the_hnsw_index(corpus, monkeypatch):
    """The vector branch ranks a filtered set of at most VECTOR_EXACT_BELOW lessons by exact distance (a
    small workspace beside many lessons would otherwise walk the HNSW graph a long way for its few rows);
    above it, the HNSW index with pgvector's iterative scan. Both give the same order here."""
    from django.db import connection

    provider = retrieval.embeddings.provider()
    vector = provider.embed_query("our script hits 429 Too Many Requests from the payments API")
    base = Lesson.objects.active()
    sent: list[str] = []
    plans: list[str] = []

    def explain(execute, sql, params, many, context):
        if not sql.startswith("EXPLAIN"):
            sent.append(sql)
            if "<=>" in sql:
                context["cursor"].execute(f"EXPLAIN {sql}", params)
                plans.append("\n".join(row[0] for row in context["cursor"].fetchall()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(explain):
        exact = retrieval.vector_branch(vector, base, 3, provider.model_id)
        exact_sent, sent[:] = list(sent), []
        monkeypatch.setattr(retrieval, "VECTOR_EXACT_BELOW", 2)  # four lessons: "a big set"
        graph = retrieval.vector_branch(vector, base, 3, provider.model_id)
    assert exact[0][0] == corpus["rate"].pk and len(exact) == 3
    assert [pk for pk, _ in graph] == [pk for pk, _ in exact]
    assert [s for _, s in graph] == pytest.approx([s for _, s in exact], abs=1e-5)
    assert "lesson_embedding_hnsw" not in plans[0], plans[0]  # the exact ranking never reads the graph
    assert not any("hnsw.iterative_scan" in sql for sql in exact_sent)
    assert any("hnsw.iterative_scan" in sql for sql in sent)  # the big set: the graph's iterative scan
