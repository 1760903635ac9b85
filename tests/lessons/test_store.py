import math

import pytest

from lessons.content import fact_content, fact_id, lesson_tags, one_line
from lessons.models import Lesson
from lessons.store import chatcli_score, persist_lesson

pytestmark = pytest.mark.django_db


def test_it_formats_chatcli_fact_content():
    content = fact_content("  big\n file  edit ", "", "use patch\tmode", "error")
    assert content == "LESSON: big file edit\nMISTAKE: (unknown)\nCORRECTION: use patch mode\nTRIGGER: error"
    assert one_line("\n\n") == "(unknown)"


def test_fact_id_is_24_hex_of_the_normalised_content():
    assert fact_id("  ABC ") == fact_id("abc")
    assert len(fact_id("abc")) == 24
    assert fact_id("abc") == "ba7816bf8f01cfea414140de"


def test_tags_follow_chatcli_order_without_dedupe():
    assert lesson_tags(["go", "reflexion"], "error") == ["go", "reflexion", "reflexion", "trigger:error"]


def test_a_fresh_lesson_scores_like_chatcli():
    assert chatcli_score(1, 0, 0.6) == pytest.approx((1 + math.log(2)) * 1.1)
    assert chatcli_score(1, 0, 0.6) == pytest.approx(1.8625, abs=1e-4)


def test_it_is_idempotent_per_source_job():
    kwargs = dict(situation="s", mistake="m", correction="c", tags=["t"], trigger="error", source_job_id="job1")
    first = persist_lesson(**kwargs)
    second = persist_lesson(**kwargs)
    assert first.action == "created" and second.action == "unchanged"
    assert Lesson.objects.count() == 1
    assert first.lesson.versions.count() == 1


def test_an_exact_duplicate_reinforces():
    first = persist_lesson(situation="s", mistake="m", correction="c", tags=[], trigger="error")
    again = persist_lesson(situation=" s ", mistake="m", correction="c", tags=[], trigger="error")
    assert again.action == "reinforced" and again.lesson.pk == first.lesson.pk
    lesson = Lesson.objects.get()
    assert lesson.access_count == 2
    assert lesson.confidence == pytest.approx(0.65)
    assert [v.action for v in lesson.versions.order_by("number")] == ["create", "reinforce"]
