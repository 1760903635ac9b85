"""Training the floor's software-work classifier (``lessons/software.py``): ``manage.py lessons
floor-classifier --write``. Reads the evaluation sets under ``tests/data``; the held-out halves of set 4 and
of the off-topic probes never (docs/lessons.md#software-work)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from lessons import embeddings, evaluation, retrieval
from lessons.software import DATA

EVAL_DIR = Path(__file__).resolve().parent.parent / "tests" / "data"
EVAL_SETS = ("retrieval_eval.jsonl", "retrieval_eval_2.jsonl", "retrieval_eval_3.jsonl", "retrieval_eval_4.jsonl")
PROBES = "retrieval_offtopic_probes.jsonl"
# Sets whose held-out half was never looked at before this classifier: only their tuning half trains it.
HALVES_ONLY = {"retrieval_eval_4.jsonl", PROBES}
L2 = 1e-3
ITERATIONS = 600
STEP = 0.5


def training_texts() -> tuple[list[str], list[int]]:
    """(texts, labels: 1 software work, 0 not), deduplicated, in a fixed order."""
    loaded = {name: evaluation.load(EVAL_DIR / name).queries for name in (*EVAL_SETS, PROBES)}
    # A held-out text is left out wherever it appears (two authors wrote the same off-topic question once).
    held = {q["query"] for name in HALVES_ONLY for q in loaded[name] if evaluation.split_of(q) != "tune"}
    texts: dict[str, int] = {}
    for queries in loaded.values():
        for query in queries:
            if query["query"] not in held:
                texts.setdefault(query["query"], 1 if query["relevant"] else 0)
    sentences = [*retrieval.background_sentences(), *_lines(DATA / "software_negatives.txt")]
    for sentence in sentences:
        if sentence not in held:
            texts.setdefault(sentence, 0)
    extra = DATA / "software_training.jsonl"
    if extra.exists():
        for line in extra.read_text(encoding="utf-8").splitlines():
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


def train(provider: embeddings.Provider) -> tuple[np.ndarray, float]:
    texts, labels = training_texts()
    return fit(embed(provider, texts), labels)


def dump(w: np.ndarray, b: float) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, w=w, b=np.float64(b))
    return buffer.getvalue()
