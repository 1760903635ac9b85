"""Training the floor's software-work classifier (``lessons/software.py``): ``manage.py lessons
floor-classifier --write``. Reads the tuning halves of the evaluation sets under ``tests/data``; a held-out
half, and the sets written held out whole, never (docs/lessons.md#software-work)."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np

from lessons import embeddings, evaluation, retrieval, software
from lessons.software import DATA

EVAL_DIR = Path(__file__).resolve().parent.parent / "tests" / "data"
# Sets with a tuning and a held-out half (evaluation.split_of): only the tuning half trains the classifier.
HALVES = ("retrieval_eval.jsonl", "retrieval_eval_2.jsonl", "retrieval_eval_4.jsonl", "retrieval_offtopic_probes.jsonl")
# Sets written to be held out whole: read only so that a text they share with a training file is left out.
# Set 6 (retrieval_eval_6.jsonl) came after the shipped weights and is not listed: listing it changes the
# training texts (16 near copies) and so the weights' digest; the next retraining should add it and
# re-measure (docs/lessons.md#set-6-written-blind-and-held-out-whole reports its figures both ways).
HELD_WHOLE = (
    "retrieval_eval_3.jsonl",
    "retrieval_eval_5.jsonl",
    "retrieval_offtopic_probes_2.jsonl",
    "retrieval_offtopic_probes_3.jsonl",
)
# Labelled texts written for the classifier alone (docs/lessons.md#software-work says by whom).
# software_training_5.jsonl (360 texts at the user-computing border) is kept but not listed: trained on it,
# with set 6 filtered too, the classifier stopped more user-computing requests everywhere held out and
# answered one more of set 1's held-out off-topic tasks — one kind worse, so not taken (docs/lessons.md).
EXTRA = (
    "software_training.jsonl",
    "software_training_2.jsonl",
    "software_training_3.jsonl",
    "software_training_4.jsonl",
)
# A training text at least this close to a held-out one (cosine of their ``use`` embeddings, whatever model
# the classifier is for: a near copy is a property of the texts, and each model has its own cosine scale) is
# the same question in other words or the other language, and is left out too: blind authors converge on
# the same everyday questions ("how often should I water a snake plant", "why is the sky blue"). Chosen by
# reading the pairs, not by any figure.
NEAR = 0.75
L2 = 1e-3
ITERATIONS = 600
STEP = 0.5


def held_out_texts() -> list[str]:
    """Every held-out task and probe: the held-out halves of ``HALVES`` and the whole of ``HELD_WHOLE``."""
    held = [
        q["query"]
        for name in HALVES
        for q in evaluation.load(EVAL_DIR / name).queries
        if evaluation.split_of(q) != "tune"
    ]
    held += [q["query"] for name in HELD_WHOLE for q in evaluation.load(EVAL_DIR / name).queries]
    return list(dict.fromkeys(held))


def training_texts() -> tuple[list[str], list[int]]:
    """(texts, labels: 1 software work, 0 not), deduplicated, in a fixed order; no text that is also held
    out (``training_data`` also leaves out the near copies)."""
    # A held-out text is left out wherever it appears (two authors wrote the same off-topic question once).
    held = set(held_out_texts())
    texts: dict[str, int] = {}
    for name in HALVES:
        for query in evaluation.load(EVAL_DIR / name).queries:
            if evaluation.split_of(query) == "tune" and query["query"] not in held:
                texts.setdefault(query["query"], 1 if query["relevant"] else 0)
    sentences = [*retrieval.background_sentences(), *_lines(DATA / "software_negatives.txt")]
    for sentence in sentences:
        if sentence not in held:
            texts.setdefault(sentence, 0)
    for name in EXTRA:
        for line in (DATA / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                if row["text"] not in held:
                    texts.setdefault(row["text"], int(row["label"]))
    return list(texts), list(texts.values())


def _lines(path: Path) -> list[str]:
    return [s.strip() for s in path.read_text(encoding="utf-8").splitlines() if s.strip() and not s.startswith("#")]


def embed(provider: embeddings.Provider, texts: list[str]) -> np.ndarray:
    """The texts' query embeddings, unit rows (float64, as ``fit`` takes them)."""
    x = np.asarray([provider.embed_query(t) for t in texts], dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def fit(x: np.ndarray, labels: list[int] | np.ndarray) -> tuple[np.ndarray, float]:
    """Full-batch gradient descent from zero weights, balanced classes, L2: the same data, the same weights."""
    y = np.asarray(labels, dtype=np.float64)
    share = y.mean()
    balance = np.where(y == 1, 0.5 / share, 0.5 / (1 - share))
    w, b = np.zeros(x.shape[1]), 0.0
    for _ in range(ITERATIONS):
        p = 1 / (1 + np.exp(-(x @ w + b)))
        g = (p - y) * balance
        w -= STEP * (x.T @ g / len(y) + L2 * w)
        b -= STEP * float(g.mean())
    return w.astype(np.float32), b


def training_data(provider: embeddings.Provider) -> tuple[list[str], np.ndarray, list[int]]:
    """(texts, their unit embeddings by ``provider``, labels): ``training_texts`` less any within ``NEAR`` of a
    held-out text (by ``use``, whatever ``provider`` is)."""
    texts, labels = training_texts()
    x = embed(provider, texts)
    use = provider if provider.model_id == embeddings.USEProvider.model_id else embeddings.load("local", "use")
    assert use is not None
    x_use = x if use is provider else embed(use, texts)
    near = (x_use @ embed(use, held_out_texts()).T).max(axis=1) >= NEAR
    keep = [i for i in range(len(texts)) if not near[i]]
    return [texts[i] for i in keep], x[keep], [labels[i] for i in keep]


def train(provider: embeddings.Provider) -> tuple[np.ndarray, float]:
    _, x, labels = training_data(provider)
    return fit(x, labels)


def digest(texts: list[str], labels: list[int]) -> str:
    """What a classifier was trained on, as a sha256: kept beside its weights, so a test can tell that every
    model's file still matches the repository's data without embedding it all again with each model."""
    return hashlib.sha256(json.dumps([texts, list(map(int, labels))], ensure_ascii=False).encode()).hexdigest()


def dump(w: np.ndarray, b: float, data: str) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, w=w, b=np.float64(b), data=np.str_(data))
    return buffer.getvalue()


def trained_on(model_id: str) -> str | None:
    """The ``digest`` a shipped classifier file records, or None (no file)."""
    try:
        with np.load(software.path_for(model_id), allow_pickle=False) as data:
            return str(data["data"]) if "data" in data else ""
    except OSError:
        return None
