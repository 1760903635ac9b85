"""Where the embedding scorer gets its vectors: one ``Embedder`` resolved from one place.

An embedder takes a list of texts and returns one vector per text, in order, or raises. The cascade
embeds each text alone (a batch of one, docs/compat/chatcli.md#embedding-scorer) so a cache hit saves exactly one call.

``LESSONBOARD_REFINE_EMBEDDER`` picks it:

- ``local`` (default): the lessons store's configured embedding provider (``LESSONBOARD_EMBEDDING_PROVIDER``,
  the bundled offline model unless told otherwise), so the scorer works with no network;
- ``llm``: the gateway's OpenAI-compatible embeddings endpoint (``lessonboard.llm.embed``) with
  ``LESSONBOARD_REFINE_EMBEDDING_MODEL``;
- ``module.path:callable``: any callable with the ``Embedder`` signature;
- ``none``: no embedder, so the cascade has no embedding stage (as chatcli with the null provider).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from lessonboard import llm

Embedder = Callable[[list[str]], list[list[float]]]


def llm_embedder(*, model: str, timeout: float) -> Embedder:
    def embed(texts: list[str]) -> list[list[float]]:
        return llm.embed(texts, model=model, timeout=timeout)

    return embed


def local_embedder() -> Embedder:
    def embed(texts: list[str]) -> list[list[float]]:
        from lessons import embeddings

        provider = embeddings.provider()
        if provider is None:
            raise embeddings.EmbeddingError("no local embedder: LESSONBOARD_EMBEDDING_PROVIDER is none")
        # Drafts are compared with each other, symmetrically: both sides embedded as documents.
        return [list(map(float, row)) for row in provider.embed_documents(list(texts))]

    return embed


def resolve_embedder() -> Embedder | None:
    """The configured embedder, or ``None`` when there is none (then no embedding stage at all)."""
    name = settings.REFINE_EMBEDDER
    if name in ("", "none"):
        return None
    if name == "local":
        return local_embedder()
    if name == "llm":
        return llm_embedder(model=settings.REFINE_EMBEDDING_MODEL, timeout=settings.REFINE_EMBED_TIMEOUT)
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise ImproperlyConfigured(
            f"LESSONBOARD_REFINE_EMBEDDER={name!r} must be 'local', 'llm', 'none' or 'module.path:callable'"
        )
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ImproperlyConfigured(f"LESSONBOARD_REFINE_EMBEDDER={name!r} cannot be imported: {exc}") from exc
    if not callable(target):
        raise ImproperlyConfigured(f"LESSONBOARD_REFINE_EMBEDDER={name!r} is not callable")
    return target  # type: ignore[no-any-return]
