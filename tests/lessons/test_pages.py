"""Lesson pages: full and HTMX-partial responses, permissions checked in the views."""

import pytest

from lessonboard import overview
from lessons import vectors
from lessons.models import Lesson, LessonStatus
from lessons.store import edit_lesson, persist_lesson

pytestmark = pytest.mark.django_db


@pytest.fixture
def lesson(db):
    result = persist_lesson(
        situation="bulk payments API calls <script>",
        mistake="retried at once",
        correction="back off on HTTP 429 with jitter",
        tags=["rate-limit", "429"],
        trigger="error",
        source_job_id="job-abc",
    )
    vectors.embed_pending()
    return result.lesson


def test_it_renders_the_search_page_in_full_and_as_an_htmx_fragment(client_as, carol, lesson):
    client = client_as(carol)
    full = client.get("/lessons/", {"q": "payments 429"})
    assert full.status_code == 200
    html = full.content.decode()
    assert "<html" in html and 'hx-trigger="input changed delay:300ms' in html
    assert "<mark>payments</mark>" in html and "&lt;script&gt;" in html and "<script>" not in html.split("</head>")[1]
    assert "Why found" in html and f"/lessons/{lesson.pk}/" in html
    partial = client.get("/lessons/", {"q": "payments 429"}, headers={"HX-Request": "true"})
    body = partial.content.decode()
    assert partial.status_code == 200 and "<html" not in body and body.lstrip().startswith('<section id="results"')
    assert "vector" in body  # the why-found table names the branches


def test_the_search_page_searches_what_an_agent_of_the_workspace_would(client_as, carol, lesson, settings):
    """Active lessons unless a status is picked, the workspace's and the shared tier's; and the 'why found'
    formula is the fusion that ran."""
    from lessons.store import set_scope, set_status
    from tests.factories import WorkspaceFactory

    archived = persist_lesson(
        situation="payments export timed out at night", mistake="", correction="page the export", tags=[],
        trigger="error",
    ).lesson  # fmt: skip
    set_status(archived, LessonStatus.ARCHIVED, actor="test")
    shop, other = WorkspaceFactory(slug="shop"), WorkspaceFactory(slug="billing")
    shared = persist_lesson(
        situation="card issuer API throttled the refunds", mistake="", correction="honour Retry-After", tags=[],
        trigger="error", workspace=other,
    ).lesson  # fmt: skip
    set_scope(shared, "shared", actor="test")
    vectors.embed_pending()
    client = client_as(carol)
    listed = client.get("/lessons/").content.decode()
    assert f"/lessons/{lesson.pk}/" in listed and f"/lessons/{archived.pk}/" not in listed
    assert f"/lessons/{archived.pk}/" in client.get("/lessons/", {"status": ""}).content.decode()
    found = client.get(
        "/lessons/", {"q": "payments API throttled refunds export", "workspace": "shop"}
    ).content.decode()
    assert f"/lessons/{shared.pk}/" in found and f"/lessons/{archived.pk}/" not in found
    assert shop.slug == "shop"
    formula = "Fused = vector cosine" if settings.RETRIEVAL_FUSION == "score" else "Fused = Σ weight"
    assert formula in found


def test_it_applies_search_filters_from_the_url(client_as, carol, lesson):
    client = client_as(carol)
    assert f"/lessons/{lesson.pk}/" in client.get("/lessons/", {"trigger": "error"}).content.decode()
    assert f"/lessons/{lesson.pk}/" not in client.get("/lessons/", {"trigger": "manual"}).content.decode()
    assert f"/lessons/{lesson.pk}/" not in client.get("/lessons/", {"q": "429", "status": "archived"}).content.decode()
    assert "Check the filters" in client.get("/lessons/", {"since": "not-a-date"}).content.decode()


def test_it_lists_similar_lessons(client_as, carol, lesson):
    other = persist_lesson(
        situation="calls to a rate limited API",
        mistake="no backoff",
        correction="honour Retry-After on 429",
        tags=[],
        trigger="error",
    ).lesson
    vectors.embed_pending()
    html = client_as(carol).get("/lessons/", {"similar": lesson.pk}).content.decode()
    assert "Lessons similar to" in html and f"/lessons/{other.pk}/" in html


def test_it_says_retrieval_is_lexical_without_embeddings(client_as, carol, lesson, settings):
    settings.EMBEDDING_PROVIDER = "none"
    html = client_as(carol).get("/lessons/", {"q": "payments"}).content.decode()
    assert "lexical only" in html and f"/lessons/{lesson.pk}/" in html


def test_it_shows_history_with_diffs_and_provenance(client_as, bob, lesson):
    edit_lesson(lesson, correction="back off exponentially on 429", actor="user:bob", reason="sharper")
    html = client_as(bob).get(f"/lessons/{lesson.pk}/").content.decode()
    assert "job-abc" in html and "sharper" in html
    assert '<li class="add">+ CORRECTION: back off exponentially on 429</li>' in html
    assert f'action="/lessons/{lesson.pk}/restore/1"' in html


def test_it_lets_a_viewer_look_but_not_change(client_as, carol, lesson):
    client = client_as(carol)
    html = client.get(f"/lessons/{lesson.pk}/").content.decode()
    assert "/restore/" not in html and "/edit" not in html
    assert client.get(f"/lessons/{lesson.pk}/edit").status_code == 403
    assert (
        client.post(f"/lessons/{lesson.pk}/edit", {"situation": "x", "correction": "y", "confidence": 1}).status_code
        == 403
    )
    assert client.post(f"/lessons/{lesson.pk}/status", {"status": "archived"}).status_code == 403
    assert client.post(f"/lessons/{lesson.pk}/restore/1").status_code == 403
    assert client.post("/lessons/new", {"text": "x"}).status_code == 403
    assert client.post("/lessons/merge", {"keep": lesson.pk, "other": lesson.pk}).status_code == 403
    lesson.refresh_from_db()
    assert lesson.status == LessonStatus.ACTIVE and lesson.versions.count() == 1 and Lesson.objects.count() == 1


def test_it_sends_anonymous_users_to_login(client, lesson):
    response = client.get("/lessons/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_a_tag_longer_than_a_lesson_holds_is_a_form_error_on_every_page_that_takes_tags(
    client_as, alice, bob, lesson, jobs
):
    """A lesson's tag holds 200 characters: the edit page, the propose-lesson form of a dead job and the
    refine proposal form answer a form error naming it (the edit page saved it: a 500, "value too long";
    the others staged a proposal whose approval then failed the same way)."""
    from lessons.review.models import Proposal
    from lessons.review.proposals import InvalidProposal, parse_proposal

    long_tag = "x" * 201
    edit = client_as(bob).post(
        f"/lessons/{lesson.pk}/edit",
        {"situation": "s", "correction": "c", "tags": f"http, {long_tag}", "trigger": "error", "confidence": "0.7"},
    )
    assert edit.status_code == 200 and "a tag has at most 200 characters" in edit.content.decode()
    lesson.refresh_from_db()
    assert lesson.tags == ["rate-limit", "429"]
    job = jobs()
    staged = client_as(alice).post(
        "/queue/propose-lesson", {"job": job.id, "situation": "s", "mistake": "m", "correction": "c", "tags": long_tag}
    )
    assert staged.status_code == 200 and "a tag has at most 200 characters" in staged.content.decode()
    assert not Proposal.objects.exists()
    with pytest.raises(InvalidProposal):  # what an agent's own lesson proposal says too
        parse_proposal(
            {
                "target": "lesson",
                "op": "add",
                "score": 0.5,
                "lesson": {"situation": "s", "correction": "c", "tags": [long_tag]},
            }
        )


def test_it_lets_a_reviewer_edit_archive_restore_and_merge(client_as, bob, lesson):
    client = client_as(bob)
    response = client.post(
        f"/lessons/{lesson.pk}/edit",
        {
            "situation": "bulk payments API calls",
            "mistake": "retried at once",
            "correction": "use backoff",
            "tags": "HTTP, 429",
            "trigger": "error",
            "confidence": "0.7",
            "reason": "shorter",
        },
    )
    assert response.status_code == 302
    lesson.refresh_from_db()
    assert lesson.correction == "use backoff" and lesson.tags == ["http", "429"] and lesson.confidence == 0.7
    assert client.post(f"/lessons/{lesson.pk}/status", {"status": "archived"}).status_code == 302
    lesson.refresh_from_db()
    assert lesson.status == LessonStatus.ARCHIVED
    assert client.post(f"/lessons/{lesson.pk}/restore/1").status_code == 302
    lesson.refresh_from_db()
    assert lesson.status == LessonStatus.ACTIVE and lesson.correction == "back off on HTTP 429 with jitter"
    assert [v.action for v in lesson.versions.order_by("number")] == ["create", "edit", "archive", "restore"]
    other = persist_lesson(
        situation="git rebase went wrong",
        mistake="reset --hard",
        correction="use reflog",
        tags=["git"],
        trigger="error",
    ).lesson
    preview = client.get("/lessons/merge", {"keep": lesson.pk, "other": other.pk})
    assert preview.status_code == 200 and "use reflog" in preview.content.decode()
    assert client.post("/lessons/merge", {"keep": lesson.pk, "other": other.pk}).status_code == 302
    other.refresh_from_db()
    assert other.status == LessonStatus.ARCHIVED and other.superseded_by_id == lesson.pk
    assert client.post("/lessons/new", {"text": "always run the focused test first"}).status_code == 302
    assert Lesson.objects.filter(trigger="manual", situation="always run the focused test first").exists()
    # A workspace the slug rule refuses (upper case, an underscore first) is a form error, not a new workspace.
    from lessonboard.models import Workspace

    for slug in ("Bad_Slug", "_x"):
        refused = client.post("/lessons/new", {"text": "pin the node version", "workspace": slug}, follow=True)
        assert "a valid workspace slug" in refused.content.decode()
        assert not Workspace.objects.filter(slug=slug).exists()
        assert not Lesson.objects.filter(situation="pin the node version").exists()


EDIT_FORM = {
    "situation": "bulk payments API calls",
    "mistake": "retried at once",
    "correction": "use backoff",
    "tags": "http, 429",
    "trigger": "error",
    "confidence": "0.6",
    "lang": "en",
    "reason": "",
}


def test_the_pages_keep_the_apis_rules_for_a_deleted_lesson(client_as, bob, lesson):
    """A tombstone is made active again before it is edited, shared, archived or merged — on the pages as over
    the API (each refusal changes nothing and writes no version)."""
    from lessons.store import set_status

    set_status(lesson, LessonStatus.DELETED, actor="user:bob")
    client = client_as(bob)
    page = client.get(f"/lessons/{lesson.pk}/").content.decode()
    assert f"/lessons/{lesson.pk}/edit" not in page and "Share with every workspace" not in page
    assert "Make active again" in page
    assert client.get(f"/lessons/{lesson.pk}/edit").status_code == 302
    assert client.post(f"/lessons/{lesson.pk}/edit", EDIT_FORM).status_code == 302
    assert client.post(f"/lessons/{lesson.pk}/scope", {"scope": "shared"}).status_code == 302
    assert client.post(f"/lessons/{lesson.pk}/status", {"status": "archived"}).status_code == 302
    followed = client.get(f"/lessons/{lesson.pk}/").content.decode()
    assert followed.count("is deleted") >= 3  # the refusals' messages
    other = persist_lesson(situation="git rebase went wrong", mistake="", correction="use reflog", tags=[], trigger="e")
    merge = client.post("/lessons/merge", {"keep": other.lesson.pk, "other": lesson.pk})
    assert merge.status_code == 200 and "a deleted lesson cannot be merged" in merge.content.decode()
    lesson.refresh_from_db()
    assert (lesson.status, lesson.scope, lesson.correction) == (
        "deleted",
        "workspace",
        "back off on HTTP 429 with jitter",
    )
    assert [v.action for v in lesson.versions.order_by("number")] == ["create", "delete"]
    # Made active again, it can be edited; saving the form unchanged writes no version.
    assert client.post(f"/lessons/{lesson.pk}/status", {"status": "active"}).status_code == 302
    assert client.post(f"/lessons/{lesson.pk}/edit", EDIT_FORM).status_code == 302
    assert client.post(f"/lessons/{lesson.pk}/edit", EDIT_FORM).status_code == 302
    assert [v.action for v in lesson.versions.order_by("number")] == ["create", "delete", "restore", "edit"]


def test_it_counts_lessons_on_the_overview(client_as, carol, lesson):
    html = client_as(carol).get("/").content.decode()
    assert "Active lessons" in html and 'href="/lessons/"' in html


def test_the_overview_counts_lessons_in_one_statement_shared_by_every_viewer(client_as, carol, bob):
    """docs/operations.md#operator-pages: one aggregate, cached for LESSONQ_COUNTS_TTL; tombstones are not
    counted as archived."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from lessons import overview as lesson_overview

    texts = [
        ("deploying on a Friday", "deploy early in the week"),
        ("rotating database passwords", "rotate them through the secret store"),
        ("editing a large file", "apply small patches"),
        ("pinning dependencies", "pin exact versions in the lock file"),
    ]
    made = [persist_lesson(situation=s, mistake="", correction=c, tags=[], trigger="manual").lesson for s, c in texts]
    assert len({lesson.pk for lesson in made}) == 4
    Lesson.objects.filter(pk=made[1].pk).update(status=LessonStatus.ARCHIVED)
    Lesson.objects.filter(pk=made[2].pk).update(status=LessonStatus.DELETED)
    lesson_overview.forget()
    with CaptureQueriesContext(connection) as seen:
        client_as(carol).get("/")
        client_as(bob).get("/")  # a second viewer within the TTL
    counted = [  # the charts' per-hour series (GROUP BY, cached on their own) aside
        q["sql"] for q in seen.captured_queries if 'FROM "lessons_lesson"' in q["sql"] and "COUNT(" in q["sql"]
    ]
    counted = [sql for sql in counted if "GROUP BY" not in sql]
    assert len(counted) == 1, counted
    assert lesson_overview.lesson_counts() == {"active": 2, "retired": 1, "unembedded": 2}
    groups = dict(overview.collect())
    assert dict((label, value) for label, value, _ in groups["Lessons"]) == {
        "Active lessons": 2,
        "Archived or superseded": 1,
        "Active lessons waiting for a vector": 2,
    }


def test_it_lists_shows_and_archives_lessons_in_the_admin(client_as, admin_user, lesson):
    client = client_as(admin_user)
    assert client.get("/admin/lessons/lesson/").status_code == 200
    assert client.get(f"/admin/lessons/lesson/{lesson.pk}/change/").status_code == 200
    assert client.get("/admin/lessons/lessonversion/").status_code == 200
    response = client.post("/admin/lessons/lesson/", {"action": "archive", "_selected_action": [lesson.pk]})
    assert response.status_code == 302
    lesson.refresh_from_db()
    assert lesson.status == LessonStatus.ARCHIVED and lesson.versions.filter(action="archive").exists()
