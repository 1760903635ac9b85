"""What a lesson's vector is made of: the one place that decides the lesson-side text that is embedded.

A lesson states its situation generally ("serving personalised responses behind a caching proxy"); the
next task names a concrete case ("put /me behind Cloudflare"). Its whole text (situation, mistake,
correction, tags: ``Lesson.embedding_text``) carries the details, the situation alone the case it applies
to. For a provider with ``situation_vector`` (the ``use`` model) the stored vector is the normalised sum
of both embeddings — one vector, one column, one HNSW search; measured on the next-task queries in
docs/lessons.md#quality-on-next-task-queries. Other providers embed the whole text alone (e5 measured no
consistent gain from the situation vector). doc2query's "applies when" phrasings, when an LLM wrote them
for the current text, are one more text in the sum for every provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lessons import doc2query, embeddings


def lesson_texts(lesson: Any, provider: embeddings.Provider) -> list[str]:
    """The texts embedded for ``lesson``, whose vectors are summed. With doc2query phrasings written for
    the current text (``lessons.doc2query``), they are one more text, all of them on one line each."""
    whole = lesson.embedding_text()
    situation = (lesson.situation or "").strip()
    texts = [whole]
    if getattr(provider, "situation_vector", False) and situation and situation != whole.strip():
        texts.append(situation)
    phrasings = doc2query.current(lesson)
    if phrasings:
        texts.append("\n".join(phrasings))
    return texts


def embed_lessons(provider: embeddings.Provider, lessons: Sequence[Any]) -> np.ndarray:
    """One L2-normalised vector per lesson, from a single ``embed_documents`` call."""
    parts = [lesson_texts(lesson, provider) for lesson in lessons]
    flat = provider.embed_documents([text for texts in parts for text in texts])
    return combine([len(texts) for texts in parts], flat, provider.dimensions)


def combine(counts: Sequence[int], flat: np.ndarray, dimensions: int) -> np.ndarray:
    """The lesson vectors from the embeddings of their texts (``counts[i]`` consecutive rows of ``flat``
    belong to lesson ``i``): each the normalised sum of its rows."""
    vectors = np.zeros((len(counts), flat.shape[1] if len(flat) else dimensions), dtype=np.float32)
    row = 0
    for index, count in enumerate(counts):
        vectors[index] = np.sum(flat[row : row + count], axis=0)
        row += count
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
