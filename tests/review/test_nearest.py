import pytest

from lessonboard.models import Workspace
from lessons.review.nearest import candidate_lessons, nearest
from lessons.store import persist_lesson, set_scope

pytestmark = pytest.mark.django_db


def test_it_finds_the_lesson_a_proposal_repeats_and_flags_it():
    ws = Workspace.objects.for_slug("ws-near")
    other = Workspace.objects.for_slug("elsewhere")
    target = persist_lesson(
        situation="editing a large file with the write tool",
        mistake="the write timed out on a 4000-line file",
        correction="use apply_patch with small hunks for large file edits",
        tags=["edits"],
        trigger="error",
        workspace=ws,
    ).lesson
    persist_lesson(
        situation="baking bread", mistake="oven too cold", correction="preheat", tags=[], trigger="error", workspace=ws
    )
    elsewhere = persist_lesson(
        situation="editing a large file with the write tool",
        mistake="timed out",
        correction="use apply_patch",
        tags=[],
        trigger="error",
        workspace=other,
    ).lesson
    found = nearest(ws, "large file edits time out with the write tool; use apply_patch with small hunks")
    lessons = [n for n in found if n.kind == "lesson"]
    assert lessons and lessons[0].lesson_id == target.pk
    assert lessons[0].flag in {"related", "near duplicate"}
    assert elsewhere.pk not in {n.lesson_id for n in found}  # only what the proposal's workspace is served
    # Once shared, the other workspace's lesson is served in every workspace, so the reviewer sees it too.
    set_scope(elsewhere, "shared", actor="test")
    assert elsewhere.pk in {n.lesson_id for n in nearest(ws, "editing a large file with the write tool timed out")}


def test_without_retrieval_the_fallback_offers_the_same_lessons_retrieve_would(settings):
    settings.EMBEDDING_PROVIDER = "local"
    settings.EMBEDDING_LOCAL_MODEL = "no-such-model"  # the embedder cannot load: EmbeddingError
    ws, other = Workspace.objects.for_slug("ws-fall"), Workspace.objects.for_slug("ws-other")
    made = {
        name: persist_lesson(
            situation=name, mistake="", correction="fix it", tags=[], trigger="manual", workspace=where
        ).lesson
        for name, where in (("own", ws), ("theirs", other), ("shared", other))
    }
    set_scope(made["shared"], "shared", actor="test")
    found = {lesson.pk for lesson in candidate_lessons(ws, "fix it", limit=5)}
    assert found == {made["own"].pk, made["shared"].pk}


def test_it_returns_nothing_for_an_empty_text():
    assert nearest(Workspace.objects.for_slug("ws-empty"), "   ") == []
