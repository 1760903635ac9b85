"""The floor's second witness: is the task about software work at all? A logistic regression over the query
embedding (one per local model: ``use``'s 512 weights and a bias, e5's and MiniLM's 384, in
``lessons/data/software-<model id>.npz``), trained by ``manage.py lessons floor-classifier --model M --write``
(``lessons/software_training.py``) on what the repository has written down:

- software work: every task that has a lesson in the tuning halves of evaluation sets 1, 2 and 4;
- not: those halves' off-topic tasks, the first off-topic probes' tuning half, the floor's background
  sentences and ``lessons/data/software_negatives.txt``;
- and the labelled texts of ``lessons/data/software_training*.jsonl`` (software work, user computing, everyday).

A held-out half, and sets 3 and 5 and the second and third probes (held out whole), are never trained
on; nor is a text within a cosine of 0.75 of a held-out one (docs/lessons.md#software-work). Full-batch
gradient descent from zero weights with balanced class weights: the same data gives the same weights.
``retrieval.floor_check`` empties the answer when the score (a logit) is below
``RETRIEVAL_FLOOR_SOFTWARE_MIN`` (each model's own by default: its logits are on its own scale).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parent / "data"

_loaded: dict[str, tuple[np.ndarray, float] | None] = {}
_lock = threading.Lock()


def path_for(model_id: str) -> Path:
    return DATA / f"software-{model_id}.npz"


def weights(model_id: str) -> tuple[np.ndarray, float] | None:
    """The shipped classifier for this model, or None (no classifier: the floor keeps its margins only)."""
    with _lock:
        if model_id not in _loaded:
            try:
                with np.load(path_for(model_id), allow_pickle=False) as data:
                    _loaded[model_id] = (np.asarray(data["w"], dtype=np.float32), float(data["b"]))
            except OSError:
                _loaded[model_id] = None
        return _loaded[model_id]


def scores(matrix: Any, model_id: str) -> np.ndarray | None:
    """Each row's software-work logit (above 0: more like the software tasks than the everyday ones), or
    None: no classifier for this model."""
    found = weights(model_id)
    if found is None:
        return None
    w, b = found
    m = np.atleast_2d(np.asarray(matrix, dtype=np.float32))
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return np.asarray((m / np.where(norms > 0, norms, 1.0)) @ w + b)


def score(vector: Any, model_id: str) -> float | None:
    """``scores`` of one task vector."""
    found = scores(vector, model_id)
    return None if found is None else float(found[0])
