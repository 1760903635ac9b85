"""A long retrieve task: ``POST /api/v1/lessons/retrieve`` with a 20,000-character task (the API's limit)
against a 200-character one (the anchor), through the Django test client and the default local embedding
model (e5), on a small lesson store. Before the cut, e5 ran over the whole text; it now embeds the first
``E5_MAX_CHARS`` characters (docs/api.md#input-policy).

    .venv/bin/python bench/bench_long_task.py [--repeat 5] [--uncut]

``--uncut`` also times one embedding of the whole 20,000 characters (what it cost before the cut).
Prints p50 of each, and the ratio long/short.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import bench_env

bench_env.setup("longtask")

from django.test import Client  # noqa: E402

from lessonboard.tokens import issue_token  # noqa: E402
from lessons import embeddings  # noqa: E402
from lessons.models import Lesson  # noqa: E402
from lessons.store import persist_lesson  # noqa: E402

WORDS = "deploy the service with helm then check that every pod is ready and roll back on failure".split()


def task_text(chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        word = f"{WORDS[len(out) % len(WORDS)]}{len(out) % 97}"
        out.append(word)
        n += len(word) + 1
    return " ".join(out)[:chars]


def p50_ms(client: Client, token: str, task: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.post(
            "/api/v1/lessons/retrieve",
            data=json.dumps({"task": task, "k": 5}),
            content_type="application/json",
            headers={"Authorization": f"Bearer {token}"},
        )
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, response.content[:200]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--uncut", action="store_true")
    args = parser.parse_args()
    if Lesson.objects.count() < 30:
        for n in range(30):
            persist_lesson(
                situation=f"{task_text(120)} case {n}",
                mistake="",
                correction=f"use helm upgrade --atomic and wait for readiness ({n})",
                tags=["deploy", f"t{n % 5}"],
                trigger="manual",
                workspace=None,
                agent="bench",
                confidence=0.6,
                provenance="manual",
                actor="bench",
                reason="bench",
            )
    token = issue_token("bench-longtask", ("full",)).plaintext
    client = Client(HTTP_HOST="localhost")
    provider = embeddings.provider()
    print(f"embedding provider: {embeddings.describe()}; cut at {embeddings.E5_MAX_CHARS} characters (e5)")
    p50_ms(client, token, task_text(200), 1)  # warm up: model load
    short = p50_ms(client, token, task_text(200), args.repeat)
    long = p50_ms(client, token, task_text(20_000), args.repeat)
    print(f"retrieve p50, 200-character task (anchor): {short:.1f} ms")
    print(f"retrieve p50, 20,000-character task:       {long:.1f} ms")
    print(f"ratio long/short: {long / short:.2f}")
    if args.uncut and isinstance(provider, embeddings.E5Provider | embeddings.E5OnnxProvider):
        start = time.perf_counter()
        if isinstance(provider, embeddings.E5Provider):
            provider._model.query(task_text(20_000))
        else:
            provider._engine.embed([task_text(20_000)], is_query=True)
        print(
            f"one uncut e5 embedding of 20,000 characters (before the cut): {(time.perf_counter() - start) * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
