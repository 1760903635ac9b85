"""The floor's software-work classifier: the shipped weights are what its training command computes from the
repository's data, and that data leaves the held-out halves out (docs/lessons.md#software-work)."""

import numpy as np
import pytest

from lessons import embeddings, evaluation, software, software_training


def test_the_shipped_weights_are_what_training_on_the_repositorys_data_gives(settings):
    provider = embeddings.load("local", "use")
    assert provider is not None
    texts, x, labels = software_training.training_data(provider)
    w, b = software_training.fit(x, labels)
    shipped = software.weights(provider.model_id)
    assert shipped is not None, "run: manage.py lessons floor-classifier --write"
    assert np.allclose(w, shipped[0], atol=1e-4) and b == pytest.approx(shipped[1], abs=1e-4), (
        "the training data changed: run manage.py lessons floor-classifier --write"
    )
    # e5's and MiniLM's were trained on the same texts (near copies judged by use whatever the model), each
    # embedded by its own model; their files record what they were trained on.
    trained = software_training.digest(texts, labels)
    settings.EMBEDDING_PROVIDER, settings.EMBEDDING_E5_ENGINE = "local", "onnx"
    for model in ("use", "e5", "minilm"):
        settings.EMBEDDING_LOCAL_MODEL = model
        model_id = embeddings.expected_model_id()  # without loading the model
        assert model_id and software_training.trained_on(model_id) == trained, (
            f"the training data changed: run manage.py lessons floor-classifier --model {model} --write"
        )
    assert software_training.trained_on("a-model-with-no-classifier") is None


def test_it_never_trains_on_a_held_out_half():
    texts, labels = software_training.training_texts()
    trained = set(texts)
    for name in software_training.HALVES:
        queries = evaluation.load(software_training.EVAL_DIR / name).queries
        held = {q["query"] for q in queries if evaluation.split_of(q) == "heldout"}
        assert held and not held & trained
        assert {q["query"] for q in queries if evaluation.split_of(q) == "tune"} & trained
    for name in software_training.HELD_WHOLE:
        held = {q["query"] for q in evaluation.load(software_training.EVAL_DIR / name).queries}
        assert held and not held & trained
    assert 0 < sum(labels) < len(labels)  # both classes


def test_it_leaves_out_a_training_text_that_is_a_near_copy_of_a_held_out_one():
    provider = embeddings.load("local", "use")
    assert provider is not None
    # One author wrote this for training; another wrote nearly the same question for the second probes.
    copy = "my printer shows offline on my Mac but it's on and connected to the wifi"
    assert copy in software_training.training_texts()[0]
    texts, x, _ = software_training.training_data(provider)
    assert copy not in texts and len(texts) == len(x)
    held = software_training.embed(provider, software_training.held_out_texts())
    assert (x @ held.T).max() < software_training.NEAR
