"""POST /api/v1/lessons and /api/v1/lessons/retrieve."""

import pytest

from lessonboard.models import AuditEvent
from lessons import vectors
from lessons.models import Lesson
from tests.support.clients import ApiClient

pytestmark = pytest.mark.django_db


def test_it_stores_a_manual_lesson_in_chatclis_manual_shape(api):
    response = api.post(
        "/api/v1/lessons", {"text": "when editing large Go files use Edit, not full rewrite", "workspace": "proj-a"}
    )
    assert response.status_code == 201
    body = response.json()
    assert body["action"] == "created"
    assert body["message"] == "lesson persisted to long-term memory (category=lesson)"
    lesson = Lesson.objects.get()
    assert lesson.content == (
        "LESSON: when editing large Go files use Edit, not full rewrite\n"
        "MISTAKE: (user-supplied lesson; no automatic mistake detection)\n"
        "CORRECTION: when editing large Go files use Edit, not full rewrite\n"
        "TRIGGER: manual"
    )
    assert lesson.tags == ["reflexion", "trigger:manual", "user-supplied"]
    assert lesson.workspace.slug == "proj-a"
    assert AuditEvent.objects.filter(action="lesson.create", object_ids=[str(lesson.pk)]).exists()
    again = api.post(
        "/api/v1/lessons", {"text": "when editing large Go files use Edit, not full rewrite", "workspace": "proj-a"}
    )
    assert again.status_code == 200 and again.json()["action"] == "reinforced"


def test_it_accepts_a_structured_lesson(api):
    response = api.post(
        "/api/v1/lessons",
        {
            "situation": "bulk API calls",
            "mistake": "no backoff",
            "correction": "back off on 429",
            "tags": ["HTTP", "429"],
            "trigger": "error",
        },
    )
    assert response.status_code == 201
    assert response.json()["lesson"]["tags"] == ["http", "429"]
    assert response.json()["lesson"]["trigger"] == "error"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "situation"),
        ({"text": ""}, "text"),
        ({"text": 12}, "text"),
        ({"text": "x", "workspace": "Bad Slug!"}, "workspace"),
        ({"text": "x", "locale": "de"}, "locale"),
        ({"situation": "s", "correction": "c", "tags": "go"}, "tags"),
        ({"situation": "s", "correction": "c", "confidence": 3}, "confidence"),
        ({"situation": "s"}, "correction"),
    ],
)
def test_it_answers_bad_lesson_input_with_a_400_naming_the_field(api, body, field):
    response = api.post("/api/v1/lessons", body)
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert Lesson.objects.count() == 0


def test_it_requires_a_full_token(agent_token):
    ingest = ApiClient(agent_token("ingest-only", "ingest"))
    assert ingest.post("/api/v1/lessons", {"text": "x"}).status_code == 403
    assert ingest.post("/api/v1/lessons/retrieve", {"task": "x"}).status_code == 403
    assert ApiClient("nope").post("/api/v1/lessons/retrieve", {"task": "x"}).status_code == 401
    assert Lesson.objects.count() == 0


def test_it_retrieves_lessons_with_chatclis_memory_block_and_reinforces_by_use(api):
    api.post(
        "/api/v1/lessons",
        {
            "situation": "bulk payments API calls",
            "mistake": "retried at once",
            "correction": "back off on HTTP 429 with jitter",
            "tags": ["rate-limit"],
            "trigger": "error",
            "workspace": "shop",
        },
    )
    api.post(
        "/api/v1/lessons",
        {
            "situation": "resolving merge conflicts",
            "mistake": "left markers",
            "correction": "grep for <<<<<<< before committing",
            "tags": ["git"],
            "trigger": "error",
            "workspace": "shop",
        },
    )
    vectors.embed_pending()
    response = api.post(
        "/api/v1/lessons/retrieve", {"task": "our job gets 429 from the payments API", "k": 1, "workspace": "shop"}
    )
    assert response.status_code == 200
    body = response.json()
    (hit,) = body["lessons"]
    assert hit["situation"] == "bulk payments API calls"
    assert hit["retrieval"]["branches"]["vector"]["rank"] == 1
    # chatcli's item, then the line saying where the lesson comes from (docs/lessons.md#scopes).
    assert body["memory_block"] == "## Long-term Memory\n- [lesson] " + hit["content"] + "\nSCOPE: workspace shop"
    assert (hit["scope"], hit["workspace"]) == ("workspace", "shop")
    lesson = Lesson.objects.get(pk=hit["id"])
    assert lesson.access_count == 2  # created (1) + this retrieval
    other = api.post("/api/v1/lessons/retrieve", {"task": "anything", "workspace": "elsewhere"}).json()
    assert other == {**other, "lessons": [], "memory_block": ""}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "task"),
        ({"task": " \n\t "}, "task"),
        ({"task": "x", "k": 0}, "k"),
        ({"task": "x", "k": "5"}, "k"),
        ({"task": "x", "hyde": "yes"}, "hyde"),
        ({"task": "x", "tags": [1]}, "tags"),
    ],
)
def test_it_answers_bad_retrieve_input_with_a_400_naming_the_field(api, body, field):
    response = api.post("/api/v1/lessons/retrieve", body)
    assert response.status_code == 400 and response.json()["field"] == field


def test_a_word_too_long_for_postgresqls_full_text_is_left_out_instead_of_failing(api, client_as, carol):
    """PostgreSQL refuses a tsquery word of 2,047 bytes or more (a 503 "retry" and a 500 on the page before):
    683 CJK characters, a 3,000-character identifier."""
    Lesson.objects.all().delete()
    api.post("/api/v1/lessons", {"text": "pin the kafka client version in the build file"})
    for task in ("中" * 683, "kafka " + "a_b" * 1000, "kafka " + "x" * 2100):
        answer = api.post("/api/v1/lessons/retrieve", {"task": task})
        assert answer.status_code == 200, answer.content[:300]
        page = client_as(carol).get("/lessons/", {"q": task})
        assert page.status_code == 200


def test_it_answers_garbled_json_with_a_400(api):
    response = api.post("/api/v1/lessons/retrieve", raw="{nope")
    assert response.status_code == 400 and response.json()["field"] == "body"


def test_it_counts_persists_and_retrievals_in_metrics(api, client):
    api.post("/api/v1/lessons", {"text": "run the focused test file first"})
    api.post("/api/v1/lessons/retrieve", {"task": "run tests"})
    text = client.get("/metrics").content.decode()
    assert 'lessonboard_lessons_persisted_total{action="created"}' in text
    assert "lessonboard_lesson_retrieval_seconds_count" in text


def test_the_server_wide_hyde_switch_applies_unless_the_request_says(api, settings, fake_openai):
    fake_openai.script("a hypothetical lesson about backing off on 429")
    settings.RETRIEVAL_HYDE = True
    on = api.post("/api/v1/lessons/retrieve", {"task": "bulk API calls get 429"}).json()
    assert on["explanation"]["hyde"] == {"text": "a hypothetical lesson about backing off on 429"}
    off = api.post("/api/v1/lessons/retrieve", {"task": "bulk API calls get 429", "hyde": False}).json()
    assert off["explanation"]["hyde"] is None
    assert len(fake_openai.chat_requests()) == 1
    # The call is counted against the workspace the task was retrieved in.
    fake_openai.script("another hypothetical lesson")
    api.post("/api/v1/lessons/retrieve", {"task": "bulk API calls get 429 again", "workspace": "shop"})
    from lessonboard.models import LLMCall

    assert list(LLMCall.objects.filter(purpose="hyde").order_by("id").values_list("workspace", flat=True)) == [
        "",
        "shop",
    ]


def test_a_requests_hyde_is_refused_while_the_server_has_it_off(api, settings, fake_openai):
    """HyDE costs an LLM call inside the web request: only the server may turn it on (docs/api.md#limits)."""
    fake_openai.script("a hypothetical lesson that must not be asked for")
    settings.RETRIEVAL_HYDE = False
    body = api.post("/api/v1/lessons/retrieve", {"task": "bulk API calls get 429", "hyde": True}).json()
    assert body["explanation"]["hyde"] == {"refused": "LESSONBOARD_RETRIEVAL_HYDE is off on this server"}
    assert fake_openai.chat_requests() == []


def test_hyde_is_skipped_at_once_while_half_the_web_processs_threads_wait_on_the_llm(api, settings, fake_openai):
    """A retrieve with HyDE on takes one of the web process's places for LLM work; with none free it embeds
    the task as is at once instead of holding another thread (docs/api.md#reviews-when-busy)."""
    from lessonboard.llm import limiter

    fake_openai.script("a hypothetical lesson that must not be asked for")
    settings.RETRIEVAL_HYDE = True
    settings.WEB_THREADS = 2  # one place
    with limiter.web_call():  # another request of this process is waiting on the model
        response = api.post("/api/v1/lessons/retrieve", {"task": "bulk API calls get 429"})
    assert response.status_code == 200
    hyde = response.json()["explanation"]["hyde"]
    assert hyde["fallback"] == "query embedded as is" and "LESSONBOARD_WEB_THREADS" in hyde["skipped"]
    assert fake_openai.chat_requests() == [] and limiter.web_calls() == 0


def test_it_gets_a_lesson_with_its_history_and_hides_other_workspaces_from_a_bound_token(api):
    from lessonboard.tokens import issue_token
    from lessons.store import persist_lesson
    from tests.factories import WorkspaceFactory

    mine, theirs = WorkspaceFactory(slug="mine"), WorkspaceFactory(slug="theirs")
    own = persist_lesson(
        situation="a", mistake="b", correction="c", tags=["x"], trigger="manual", workspace=mine
    ).lesson
    other = persist_lesson(
        situation="d", mistake="e", correction="f", tags=["y"], trigger="manual", workspace=theirs
    ).lesson
    Lesson.objects.filter(pk=own.pk).update(status="archived")
    from lessons.models import LessonVersion

    LessonVersion.objects.create(lesson=own, number=2, action="archive", snapshot={}, actor="user:ann", reason="old")
    body = api.post("/api/v1/lessons/get", {"id": own.pk, "history": True}).json()
    assert body["lesson"]["id"] == own.pk and body["lesson"]["status"] == "archived"
    assert [(v["number"], v["action"]) for v in body["versions"]] == [(2, "archive"), (1, "create")]
    assert api.post("/api/v1/lessons/get", {"id": own.pk}).json()["versions"] is None
    bound = ApiClient(issue_token("bound", ["full"], workspaces=["mine"]).plaintext)
    assert bound.post("/api/v1/lessons/get", {"id": own.pk}).status_code == 200
    hidden = bound.post("/api/v1/lessons/get", {"id": other.pk})
    assert hidden.status_code == 404 and hidden.json()["field"] == "id"
    assert api.post("/api/v1/lessons/get", {"id": 10**9}).status_code == 404
    bad = api.post("/api/v1/lessons/get", {"id": "seven"})
    assert bad.status_code == 400 and bad.json()["field"] == "id"


def test_it_lists_lessons_a_page_at_a_time_with_filters_and_a_bound_tokens_workspace(api):
    from lessonboard.tokens import issue_token
    from lessons.store import persist_lesson
    from tests.factories import WorkspaceFactory

    mine, theirs = WorkspaceFactory(slug="mine"), WorkspaceFactory(slug="theirs")
    texts = [
        ("rotating database passwords", "kept the old credential pooled", "restart pools after rotation"),
        ("uploading large videos", "nginx refused the body", "raise client_max_body_size"),
        ("scheduling nightly reports", "cron used the server timezone", "write schedules in UTC"),
        ("parsing spreadsheet exports", "decimal commas broke float()", "parse with the source locale"),
        ("tagging releases", "tagged an unmerged commit", "tag the merge commit"),
    ]
    made = [
        persist_lesson(situation=a, mistake=b, correction=c, tags=["paged"], trigger="manual", workspace=mine).lesson
        for a, b, c in texts
    ]
    persist_lesson(situation="d", mistake="e", correction="f", tags=["paged"], trigger="manual", workspace=theirs)
    seen, cursor = [], None
    while True:
        body = api.post("/api/v1/lessons/list", {"workspace": "mine", "limit": 2, "cursor": cursor}).json()
        seen += [lesson["id"] for lesson in body["lessons"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [lesson.pk for lesson in reversed(made)]  # newest first, no repeats, nothing skipped
    Lesson.objects.filter(pk=made[0].pk).update(status="archived")
    archived = api.post("/api/v1/lessons/list", {"workspace": "mine", "status": "archived"}).json()
    assert [lesson["id"] for lesson in archived["lessons"]] == [made[0].pk]
    assert len(api.post("/api/v1/lessons/list", {"tags": ["paged"], "status": "any"}).json()["lessons"]) == 6
    bound = ApiClient(issue_token("bound", ["full"], workspaces=["mine"]).plaintext)
    assert bound.post("/api/v1/lessons/list", {}).json()["field"] == "workspace"
    refused = bound.post("/api/v1/lessons/list", {"workspace": "theirs"})
    assert refused.status_code == 403 and refused.json()["field"] == "workspace"
    assert len(bound.post("/api/v1/lessons/list", {"workspace": "mine"}).json()["lessons"]) == 4
    bad = api.post("/api/v1/lessons/list", {"limit": 0})
    assert bad.status_code == 400 and bad.json()["field"] == "limit"
