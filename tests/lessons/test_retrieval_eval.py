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


def test_it_has_next_task_queries_in_both_languages_split_in_halves_and_off_topic_queries():
    data = evaluation.load(EVAL)
    for split in ("tune", "heldout"):
        half = evaluation.subset(data, query_type="next-task", split=split).queries
        assert len(half) >= 25
        assert {q["lang"] for q in half} == {"en", "pt"}
    off_topic = evaluation.subset(data, query_type="off-topic").queries
    assert len(off_topic) >= 30 and {q["lang"] for q in off_topic} == {"en", "pt"}
    assert all(q["relevant"] == [] for q in off_topic)


def test_it_reaches_its_measured_recall_and_answers_off_topic_tasks_with_nothing():
    assert settings.EMBEDDING_PROVIDER == "local"
    data = evaluation.load(EVAL)
    ids = evaluation.store(data)
    assert Lesson.objects.active().count() == len(data.lessons)  # no eval lesson absorbed another
    assert vectors.embed_pending() == len(data.lessons)
    from django.db import connection

    with connection.cursor() as cursor:  # the full-text branch's idf comes from the planner statistics
        cursor.execute("ANALYZE lessons_lesson")
    retrieval.reset_term_stats()

    def ranked(branches):
        return lambda q: [hit.lesson.pk for hit in retrieval.search(q, k=10, branches=branches).hits]

    original = evaluation.subset(data, query_type="original")
    held_out = evaluation.subset(data, query_type="next-task", split="heldout", batch=1)
    held_out_2 = evaluation.subset(data, query_type="next-task", split="heldout", batch=2)
    results = {
        "keyword-only": evaluation.measure(original, ids, ranked(("text",))),
        "vector-only": evaluation.measure(original, ids, ranked(("vector",))),
        "hybrid": evaluation.measure(original, ids, ranked(retrieval.BRANCHES)),
        "next-task held-out": evaluation.measure(held_out, ids, ranked(retrieval.BRANCHES)),
        "batch-2 held-out": evaluation.measure(held_out_2, ids, ranked(retrieval.BRANCHES)),
    }
    calibration = evaluation.subset(data, query_type="off-topic", split="tune")
    empty, total = evaluation.empty_answers(calibration, ranked(retrieval.BRANCHES))
    retrieval.reset_term_stats()
    print(f"\nembedder: {settings.EMBEDDING_LOCAL_MODEL}, {len(data.lessons)} lessons")
    for label, metrics in results.items():
        print(metrics.line(label))
    print(f"off-topic (calibration half) answered with no lesson: {empty}/{total}")
    # Floors at the measured figures (docs/lessons.md#quality-on-next-task-queries), not the goals.
    assert results["hybrid"].recall_at_5 >= 0.90
    assert results["next-task held-out"].recall_at_5 >= 0.70 and results["next-task held-out"].mrr >= 0.50
    assert results["batch-2 held-out"].recall_at_5 >= 0.65
    assert (empty, total) == (30, 30)


EVAL_2 = Path(__file__).resolve().parent.parent / "data" / "retrieval_eval_2.jsonl"
EVAL_3 = Path(__file__).resolve().parent.parent / "data" / "retrieval_eval_3.jsonl"
EVAL_4 = Path(__file__).resolve().parent.parent / "data" / "retrieval_eval_4.jsonl"
EVAL_5 = Path(__file__).resolve().parent.parent / "data" / "retrieval_eval_5.jsonl"
EVAL_6 = Path(__file__).resolve().parent.parent / "data" / "retrieval_eval_6.jsonl"
EVAL_7 = Path(__file__).resolve().parent.parent / "data" / "retrieval_eval_7.jsonl"
PROBES = Path(__file__).resolve().parent.parent / "data" / "retrieval_offtopic_probes.jsonl"
PROBES_2 = Path(__file__).resolve().parent.parent / "data" / "retrieval_offtopic_probes_2.jsonl"
PROBES_3 = Path(__file__).resolve().parent.parent / "data" / "retrieval_offtopic_probes_3.jsonl"


def test_the_sets_have_the_kinds_and_halves_the_figures_are_reported_on():
    sets = [evaluation.load(path) for path in (EVAL, EVAL_2, EVAL_3, EVAL_4, EVAL_5, EVAL_6, EVAL_7)]
    one, two, three, four, five, six, seven = sets
    kinds = [evaluation.kind_of(q) for q in one.queries]
    assert kinds.count("identifier") >= 60 and kinds.count("near-twin") >= 20
    for data in (one, two, four, five):
        groups = evaluation.by_kind_and_half(data)
        assert {("identifier", "tune"), ("identifier", "heldout"), ("off-topic", "heldout")} <= set(groups)
    # Set 3 is held out whole: nothing was chosen on it
    # (docs/lessons.md#sets-3-and-4-and-the-off-topic-probes-written-blind).
    assert {evaluation.split_of(q) for q in three.queries} == {"heldout"}
    # So is set 6, written blind after every default of this page was chosen
    # (docs/lessons.md#set-6-written-blind-and-held-out-whole).
    assert {evaluation.split_of(q) for q in six.queries} == {"heldout"}
    # And set 7, written blind after the floor's sliding margin was chosen, to confirm it
    # (docs/lessons.md#set-7-written-after-the-floors-choice).
    assert {evaluation.split_of(q) for q in seven.queries} == {"heldout"}
    for data in sets:
        ids = {row["id"] for row in data.lessons}
        assert all(set(q["relevant"]) <= ids for q in data.queries)
    # Set 5's off-topic tasks come in three groups; software work of domains none of its lessons touches
    # is one (docs/lessons.md#set-5-and-the-second-probes).
    for data in (five, six, seven):
        assert {q.get("group") for q in data.queries if not q["relevant"]} == {
            "everyday",
            "user-computing",
            "software-elsewhere",
        }
    for path in (PROBES, PROBES_2, PROBES_3):
        probes = evaluation.load(path)
        assert not probes.lessons and all(q["relevant"] == [] for q in probes.queries)
        assert {(q["group"], q["lang"]) for q in probes.queries} == {
            (g, lang) for g in ("everyday", "user-computing") for lang in ("en", "pt")
        }
    for path in (PROBES_2, PROBES_3):
        assert {evaluation.split_of(q) for q in evaluation.load(path).queries} == {"heldout"}
    lesson_ids = [{row["id"] for row in data.lessons} for data in sets]
    assert sum(map(len, lesson_ids)) == len(set().union(*lesson_ids))  # written apart


# Off-topic held-out tasks answered with no lesson, at least, as measured (docs/lessons.md#software-work
# says what the floor still misses): the set's own (set 5: 11 of its 27 are software work of other domains,
# which the floor answers), the 38 held-out first probes, the 100 second and the 120 third against its store.
# Set 6: 27 of its 70 (35 software work of other domains, all answered); set 7: 30 of its 48 (16 such).
EMPTY_AT_LEAST = {EVAL: 20, EVAL_2: 13, EVAL_3: 29, EVAL_4: 18, EVAL_5: 15, EVAL_6: 27, EVAL_7: 30}
PROBES_EMPTY_AT_LEAST = {
    PROBES: {EVAL: 33, EVAL_2: 35, EVAL_3: 36, EVAL_4: 36, EVAL_5: 36, EVAL_6: 35, EVAL_7: 36},
    PROBES_2: {EVAL: 91, EVAL_2: 91, EVAL_3: 94, EVAL_4: 92, EVAL_5: 93, EVAL_6: 92, EVAL_7: 95},
    PROBES_3: {EVAL: 92, EVAL_2: 91, EVAL_3: 101, EVAL_4: 103, EVAL_5: 105, EVAL_6: 103, EVAL_7: 102},
}


@pytest.mark.parametrize(
    "path",
    [EVAL, EVAL_2, EVAL_3, EVAL_4, EVAL_5, EVAL_6, EVAL_7],
    ids=["set 1", "set 2", "set 3", "set 4", "set 5", "set 6", "set 7"],
)
def test_it_finds_exact_identifiers_on_the_held_out_half_of_every_set(path):
    data = evaluation.load(path)
    ids = evaluation.store(data)
    vectors.embed_pending()
    from django.db import connection

    with connection.cursor() as cursor:  # the full-text branch's idf comes from the planner statistics
        cursor.execute("ANALYZE lessons_lesson")
    retrieval.reset_term_stats()
    groups = evaluation.by_kind_and_half(data)

    def ranked(q):
        return [hit.lesson.pk for hit in retrieval.search(q, k=10).hits]

    identifiers = evaluation.measure(groups[("identifier", "heldout")], ids, ranked)
    empty, total = evaluation.empty_answers(groups[("off-topic", "heldout")], ranked)
    print(f"\n{path.name}: {identifiers.line('identifiers held out')}; off-topic empty {empty}/{total}")
    assert identifiers.recall_at_5 >= 0.95  # measured 1.00 on all seven (docs/lessons.md#fusion)
    assert empty >= EMPTY_AT_LEAST[path]
    for probes_path, at_least in PROBES_EMPTY_AT_LEAST.items():
        probes = evaluation.by_kind_and_half(evaluation.load(probes_path))[("off-topic", "heldout")]
        probes_empty, probes_total = evaluation.empty_answers(probes, ranked)
        print(f"held-out {probes_path.name} against it: {probes_empty}/{probes_total} with no lesson")
        assert probes_empty >= at_least[path]
    retrieval.reset_term_stats()
