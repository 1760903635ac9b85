"""Recall of hybrid retrieval on the evaluation set, with the default local embedder."""

from pathlib import Path

import pytest
from django.conf import settings

from lessons import evaluation, retrieval, vectors
from lessons.models import Lesson

pytestmark = pytest.mark.django_db

EVAL = Path(__file__).resolve().parent.parent / "data" / "retrieval_eval.jsonl"


def test_it_has_a_big_enough_evaluation_set():
    data = evaluation.load(EVAL)
    assert len(data.lessons) >= 80 and len(data.queries) >= 40
    assert sum(1 for row in data.lessons if row["id"].startswith("pt-")) >= 8
    ids = {row["id"] for row in data.lessons}
    assert all(set(q["relevant"]) <= ids for q in data.queries)


def test_it_reaches_hybrid_recall_at_5_of_090_with_the_local_embedder():
    assert settings.LESSONS_EMBEDDING_PROVIDER == "local"
    data = evaluation.load(EVAL)
    ids = evaluation.store(data)
    assert Lesson.objects.active().count() == len(data.lessons)  # no eval lesson absorbed another
    assert vectors.embed_pending() == len(data.lessons)

    def ranked(branches):
        return lambda q: [hit.lesson.pk for hit in retrieval.search(q, k=10, branches=branches).hits]

    results = {
        "keyword-only": evaluation.measure(data, ids, ranked(("text",))),
        "vector-only": evaluation.measure(data, ids, ranked(("vector",))),
        "hybrid": evaluation.measure(data, ids, ranked(retrieval.BRANCHES)),
    }
    print(
        f"\nembedder: {settings.LESSONS_EMBEDDING_LOCAL_MODEL}, {len(data.lessons)} lessons, {len(data.queries)} queries"
    )
    for label, metrics in results.items():
        print(metrics.line(label))
    assert results["hybrid"].recall_at_5 >= 0.90
