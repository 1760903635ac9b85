"""The retrieval floor, the task length bound, the query-vector cache and the full-text bound."""

import pytest

from lessons import embeddings, retrieval, software, vectors
from lessons.store import persist_lesson

pytestmark = pytest.mark.django_db


def add(situation, mistake, correction, tags=()):
    return persist_lesson(
        situation=situation, mistake=mistake, correction=correction, tags=list(tags), trigger="error"
    ).lesson


@pytest.fixture
def corpus(db):
    lessons = {
        "cache": add(
            "serving personalised responses behind a caching proxy or CDN",
            "one user's page was cached and served to other users",
            "mark per-user responses Cache-Control: private and set Vary",
            ["cache", "cdn"],
        ),
        "rate": add(
            "bulk calls to the payments API",
            "no backoff after HTTP 429",
            "retry 429 with exponential backoff and jitter",
            ["rate-limit"],
        ),
        "migration": add(
            "migração de banco que renomeia uma coluna em produção",
            "renomeou a coluna direto e a versão antiga da aplicação quebrou",
            "fazer a mudança em etapas: adicionar a nova coluna, copiar os dados e remover a antiga depois",
            ["migracao"],
        ),
    }
    vectors.embed_pending()
    retrieval.query_vectors().clear()
    return lessons


def test_it_answers_an_off_topic_task_with_no_lesson_and_says_why(api, corpus):
    body = api.post("/api/v1/lessons/retrieve", {"task": "what should I wear to a summer wedding on the beach"}).json()
    assert body["lessons"] == [] and body["memory_block"] == ""
    assert body["reason"].startswith("no lesson applies")
    floor = body["explanation"]["floor"]
    assert floor["passed"] is False and floor["best_similarity"] - floor["background_similarity"] < floor["margin"]


def test_it_answers_an_on_topic_task_above_the_floor(api, corpus):
    body = api.post(
        "/api/v1/lessons/retrieve", {"task": "put the /me and /cart endpoints behind Cloudflare", "k": 1}
    ).json()
    assert [hit["id"] for hit in body["lessons"]] == [corpus["cache"].pk]
    assert body["reason"] is None and body["explanation"]["floor"]["passed"] is True


def test_it_lets_the_margin_turn_the_floor_off(corpus, settings):
    settings.RETRIEVAL_FLOOR_MARGIN = -1.0
    result = retrieval.search("what should I wear to a summer wedding on the beach", k=3)
    assert len(result.hits) == 3 and result.reason == ""


def test_it_keeps_the_hits_of_a_person_browsing_below_the_floor_and_shows_the_verdict(corpus):
    result = retrieval.search("what should I wear to a summer wedding on the beach", k=3, floor=False)
    assert len(result.hits) == 3
    assert result.explanation["floor"]["reason"].startswith("no lesson applies")


def test_it_says_why_an_answer_is_empty_when_nothing_matches_the_filters(corpus):
    result = retrieval.search("retry 429", filters=retrieval.Filters(workspace="nowhere"))
    assert result.hits == [] and result.reason == "no lesson matches the task and the filters"


def test_it_cuts_a_long_task_before_embedding_it(corpus, settings):
    settings.RETRIEVAL_QUERY_MAX_CHARS = 120
    task = "bulk calls to the payments API answer 429; " * 500  # ~22,000 characters
    result = retrieval.search(task, k=1)
    assert result.explanation["truncated"] == {"from_chars": len(task), "to_chars": 120}
    assert result.explanation["embedded_text"] == task[:120]
    assert [hit.lesson for hit in result.hits] == [corpus["rate"]]


def test_it_embeds_a_repeated_task_once(corpus, monkeypatch):
    provider = embeddings.provider()
    calls = []
    real = provider.embed_query
    monkeypatch.setattr(provider, "embed_query", lambda text: calls.append(text) or real(text))
    first = retrieval.search("retry the payments API after 429", k=1)
    second = retrieval.search("retry the payments API after 429", k=1)
    assert calls == ["retry the payments API after 429"]
    assert first.explanation["query_vector_cached"] is False and second.explanation["query_vector_cached"] is True
    assert [h.lesson for h in first.hits] == [h.lesson for h in second.hits] == [corpus["rate"]]


def test_it_evicts_the_least_recently_used_query_vector(corpus, settings):
    settings.RETRIEVAL_QUERY_CACHE = 2
    cache = retrieval.query_vectors()
    provider = embeddings.provider()
    for text in ("a task", "b task", "a task", "c task"):  # "b task" is the least recently used at "c task"
        cache.get(provider, text)
    assert cache.get(provider, "a task")[1] is True
    assert cache.get(provider, "b task")[1] is False


def test_it_ranks_at_most_the_configured_number_of_full_text_candidates(corpus, settings):
    for job in ("nightly invoices", "refund sweep", "card audit", "ledger export"):
        add(f"the {job} job calls the payments API", f"{job} hammered it", f"throttle the {job}", ["rate-limit"])
    base = retrieval.Lesson.objects.active()
    assert len(retrieval.text_branch("payments API backoff", base, 20)) == 5
    settings.RETRIEVAL_TEXT_CANDIDATES = 2
    assert len(retrieval.text_branch("payments API backoff", base, 20)) == 2


def test_it_shows_a_person_the_hits_and_the_floors_verdict_on_the_search_page(client_as, carol, corpus):
    html = client_as(carol).get("/lessons/", {"q": "what should I wear to a summer wedding on the beach"}).content
    page = html.decode()
    assert "Below the floor: an agent's retrieve would get no lesson" in page
    assert f"/lessons/{corpus['cache'].pk}/" in page  # the hits are still listed
    on_topic = client_as(carol).get("/lessons/", {"q": "put the /me endpoint behind Cloudflare"}).content.decode()
    assert "Below the floor" not in on_topic


def test_it_keeps_the_floors_background_vectors_for_the_next_process(corpus, monkeypatch):
    provider = embeddings.provider()
    retrieval._background.clear()
    first = retrieval.background_vectors(provider)
    assert first.shape == (len(retrieval.background_sentences()), provider.dimensions)
    retrieval._background.clear()  # a new process: the vectors come from the data dir, not the model

    def refuse(texts):
        raise AssertionError("embedded again")

    monkeypatch.setattr(provider, "embed_documents", refuse)
    assert (retrieval.background_vectors(provider) == first).all()


def test_the_floor_is_relaxed_only_when_the_branches_agree_on_the_best_lesson(corpus, settings):
    agreeing = "bulk payments API calls answer HTTP 429"  # full text and vector both put "rate" first
    settings.RETRIEVAL_FLOOR_SOFTWARE_SLIDE = 0.0  # the margins as set (the slide: its own test)
    settings.RETRIEVAL_EXACT_MIN_IDF = 100.0  # "429" alone is not a witness here (the next test: it can be)
    verdict = retrieval.search(agreeing, k=1, floor=False).explanation["floor"]
    assert verdict["branches_agree"] is True
    gap = verdict["best_similarity"] - verdict["background_similarity"]
    settings.RETRIEVAL_FLOOR_MARGIN = gap + 0.01  # the gap alone no longer passes …
    settings.RETRIEVAL_FLOOR_MARGIN_AGREE = gap + 0.01
    assert retrieval.search(agreeing, k=1).hits == []
    settings.RETRIEVAL_FLOOR_MARGIN_AGREE = gap - 0.01  # … the agreement of the branches does
    result = retrieval.search(agreeing, k=1)
    assert [h.lesson.pk for h in result.hits] == [corpus["rate"].pk]
    assert result.explanation["floor"]["margin"] == pytest.approx(gap - 0.01, abs=1e-4)
    off = retrieval.search("what should I wear to a summer wedding on the beach", k=1, floor=False)
    assert off.explanation["floor"]["branches_agree"] is False  # no full-text witness: the margin stays
    assert off.explanation["floor"]["margin"] == pytest.approx(settings.RETRIEVAL_FLOOR_MARGIN, abs=1e-4)


def test_the_floor_passes_a_task_whose_identifiers_are_in_the_lesson_both_branches_put_first(corpus, settings):
    task = "bulk payments API calls answer HTTP 429"  # "429" is in "rate", which both branches put first
    settings.RETRIEVAL_FLOOR_SOFTWARE_SLIDE = 0.0
    settings.RETRIEVAL_EXACT_MIN_IDF = 0.5  # three lessons: a term in one of them is worth ~1 idf
    verdict = retrieval.search(task, k=1, floor=False).explanation["floor"]
    gap = verdict["best_similarity"] - verdict["background_similarity"]
    settings.RETRIEVAL_FLOOR_MARGIN = settings.RETRIEVAL_FLOOR_MARGIN_AGREE = gap + 0.01  # the cosines fail
    result = retrieval.search(task, k=1)
    assert [h.lesson.pk for h in result.hits] == [corpus["rate"].pk]
    assert result.explanation["floor"]["rare_identifiers_agree"] is True
    settings.RETRIEVAL_EXACT_MIN_IDF = 100.0  # without the identifier witness the same task is emptied
    result = retrieval.search(task, k=1)
    assert result.hits == [] and "rare_identifiers_agree" not in result.explanation["floor"]


def test_the_floors_margin_slides_with_the_tasks_software_work_score(corpus, settings):
    """A task that plainly is software work is served a little further from the lessons: its gap counts
    RETRIEVAL_FLOOR_SOFTWARE_SLIDE × its classifier score too — in a retrieve and in ``floor_passes`` (the
    impact preview's and the gaps' rule) alike."""
    task = "put the /me and /cart endpoints behind Cloudflare"
    settings.RETRIEVAL_FLOOR_SOFTWARE_SLIDE = 0.0
    verdict = retrieval.search(task, k=1, floor=False).explanation["floor"]
    gap, score = verdict["best_similarity"] - verdict["background_similarity"], verdict["software_score"]
    assert score > 0.5 and "software_slide" not in verdict
    settings.RETRIEVAL_FLOOR_MARGIN = settings.RETRIEVAL_FLOOR_MARGIN_AGREE = gap + 0.01  # the gap alone fails
    assert retrieval.search(task, k=1).hits == []
    settings.RETRIEVAL_FLOOR_SOFTWARE_SLIDE = 0.02 / score  # slid by 0.02: it clears the margin
    result = retrieval.search(task, k=1)
    assert [h.lesson.pk for h in result.hits] == [corpus["cache"].pk]
    floor = result.explanation["floor"]
    assert floor["software_slide"] == pytest.approx(0.02, abs=1e-3)
    assert floor["margin"] == pytest.approx(gap + 0.01 - 0.02, abs=1e-3)  # the margin this task had to clear
    provider = embeddings.provider()
    vector = provider.embed_query(task)
    best = floor["best_similarity"]
    assert bool(retrieval.floor_passes(vector, [best], provider)[0]) is True
    settings.RETRIEVAL_FLOOR_SOFTWARE_SLIDE = 0.0
    assert bool(retrieval.floor_passes(vector, [best], provider)[0]) is False


def test_a_number_of_one_or_two_digits_is_a_word_and_of_three_or_more_an_identifier(corpus):
    terms, _ = retrieval.analyse_terms("a 5 day trip, 12 stops, then HTTP 429 on port 8080")
    exact = {t.label: t.exact for t in terms}
    assert exact["5"] is False and exact["12"] is False
    assert exact["429"] is True and exact["8080"] is True


def test_a_task_the_software_classifier_scores_below_its_minimum_gets_no_lesson_and_says_why(corpus, settings):
    task = "put the /me and /cart endpoints behind Cloudflare"
    verdict = retrieval.search(task, k=1).explanation["floor"]
    assert verdict["passed"] is True and verdict["software_score"] > settings.RETRIEVAL_FLOOR_SOFTWARE_MIN
    settings.RETRIEVAL_FLOOR_SOFTWARE_MIN = verdict["software_score"] + 0.01
    result = retrieval.search(task, k=1)
    assert result.hits == [] and result.explanation["floor"]["not_software_work"] is True
    assert "does not look like software work" in result.explanation["floor"]["reason"]
    settings.RETRIEVAL_FLOOR_SOFTWARE_MIN = -100.0  # off
    assert [h.lesson.pk for h in retrieval.search(task, k=1).hits] == [corpus["cache"].pk]


@pytest.mark.parametrize("model", ["use", "e5", "minilm"])
def test_each_local_models_classifier_puts_its_threshold_between_software_tasks_and_everyday_requests(model, settings):
    provider = embeddings.load("local", model, e5_engine="onnx")
    assert provider is not None and software.weights(provider.model_id) is not None
    minimum = settings.LESSONS_MODEL_DEFAULTS[model]["software_min"]
    tasks = ("retry HTTP 429 with backoff", "the nightly export job runs twice after the cron change")
    life = ("a cake recipe for my mother", "how do I turn on subtitles on my TV")
    work = [software.score(provider.embed_query(t), provider.model_id) for t in tasks]
    other = [software.score(provider.embed_query(t), provider.model_id) for t in life]
    assert min(work) > minimum > max(other)
    assert software.score(provider.embed_query("anything"), "a-model-with-no-classifier") is None
