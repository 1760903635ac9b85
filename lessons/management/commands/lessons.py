"""``manage.py lessons reembed|import|export``."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lessonboard.models import SLUG_RE, AuditEvent, Workspace
from lessons import embeddings, interchange, vectors
from lessons.models import Lesson


class ProgressBar:
    """``[#####.....] 120/400 30% 55.1/s ETA 0:00:05`` on one line, redrawn in place when stderr is a terminal;
    elsewhere (a log) a line every ``LOG_EVERY`` seconds and the last one."""

    LOG_EVERY = 10.0  # seconds

    def __init__(self, stream: Any, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self.started = time.monotonic()
        self.tty = getattr(stream, "isatty", lambda: False)()
        self.logged = -self.LOG_EVERY

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.tty and done < total and now - self.logged < self.LOG_EVERY:
            return
        self.logged = now
        filled = int(self.width * done / total) if total else self.width
        rate = done / max(now - self.started, 1e-9)
        eta = int((total - done) / rate) if rate > 0 else 0
        line = (
            f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {100 * done // max(total, 1)}% {rate:.1f}/s"
            f" ETA {eta // 3600}:{eta // 60 % 60:02d}:{eta % 60:02d}"
        )
        self.stream.write(("\r" + line + ("\n" if done >= total else "")) if self.tty else line + "\n")
        self.stream.flush()


class Command(BaseCommand):
    help = "Lessons: recompute embeddings (reembed), import/export chatcli memory_index.json or JSONL with history."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        reembed = sub.add_parser("reembed", help="embed lessons lacking a vector from the configured model")
        reembed.add_argument("--all", action="store_true", help="recompute every lesson, not only the missing ones")
        reembed.add_argument(
            "--resize",
            action="store_true",
            help="first change the vector column to LESSONBOARD_EMBEDDING_DIMENSIONS (drops every vector)",
        )
        reembed.add_argument(
            "--threads",
            type=int,
            default=os.cpu_count() or 1,
            help="CPUs the local model uses for this run (default: every CPU; the server's own setting is "
            "LESSONBOARD_EMBEDDING_THREADS); use runs that many single-threaded worker processes, the other "
            "models that many threads",
        )
        imp = sub.add_parser("import", help="import lessons from a file")
        imp.add_argument("path", type=Path)
        imp.add_argument(
            "--format", choices=("memory-index", "jsonl"), default=None, help="default: from the file name"
        )
        imp.add_argument("--workspace", default="", help="workspace slug for imported memory_index lessons")
        exp = sub.add_parser("export", help="export lessons to a file")
        exp.add_argument("path", type=Path)
        exp.add_argument(
            "--format",
            choices=("memory-index", "jsonl", "lessons-md"),
            default=None,
            help="default: from the file name (.jsonl, LESSONS.md, else memory-index)",
        )
        exp.add_argument("--workspace", default="", help="only this workspace's lessons (memory-index, lessons-md)")
        clf = sub.add_parser(
            "floor-classifier",
            help="train the floor's software-work classifier for a local model from the repository's evaluation data",
        )
        clf.add_argument("--write", action="store_true", help="write lessons/data/software-<model id>.npz")
        clf.add_argument(
            "--model", choices=("use", "e5", "minilm"), default="use", help="the local model (e5: its onnx engine)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            if action == "reembed":
                self.reembed(options)
            elif action == "import":
                self.import_(options)
            elif action == "floor-classifier":
                self.floor_classifier(options)
            else:
                self.export(options)
        except interchange.InterchangeError as exc:
            raise CommandError(str(exc)) from exc
        except OSError as exc:  # a directory, a path it may not read or write
            raise CommandError(f"{exc.filename or options.get('path')}: {exc.strerror or exc}") from exc
        except embeddings.EmbeddingError as exc:
            raise CommandError(f"embedding failed: {exc}") from exc

    def floor_classifier(self, options: dict[str, Any]) -> None:
        from lessonboard import files
        from lessons import software, software_training

        try:
            provider = embeddings.load("local", options["model"], e5_engine="onnx")
        except ImportError as exc:
            raise CommandError(
                f"the {options['model']} model is not installed: .venv/bin/pip install -r "
                f"requirements-{options['model']}.txt ({exc})"
            ) from exc
        except embeddings.EmbeddingError as exc:
            raise CommandError(f"the {options['model']} model cannot be loaded: {exc}") from exc
        if provider is None:
            raise CommandError(f"the {options['model']} model is not installed")
        texts, x, labels = software_training.training_data(provider)
        w, b = software_training.fit(x, labels)
        target = software.path_for(provider.model_id)
        self.stdout.write(f"{len(texts)} texts ({sum(labels)} software work), bias {b:.4f}")
        if options["write"]:
            files.write_atomic(
                target, software_training.dump(w, b, software_training.digest(texts, labels)), mode=0o644
            )
            self.stdout.write(f"wrote {target}")

    @staticmethod
    def _format(options: dict[str, Any]) -> str:
        if options["format"]:
            return str(options["format"])
        if options["path"].name == "LESSONS.md":
            return "lessons-md"
        return "jsonl" if options["path"].suffix == ".jsonl" else "memory-index"

    def reembed(self, options: dict[str, Any]) -> None:
        if embeddings.expected_model_id() is None:
            raise CommandError("LESSONBOARD_EMBEDDING_PROVIDER=none: there is nothing to embed with")
        if options["resize"]:
            vectors.resize_column(settings.EMBEDDING_DIMENSIONS)
            self.stdout.write(f"embedding column is now vector({settings.EMBEDDING_DIMENSIONS})")
        elif (actual := vectors.column_dimensions()) not in (None, settings.EMBEDDING_DIMENSIONS):
            raise CommandError(
                f"the column is vector({actual}) but LESSONBOARD_EMBEDDING_DIMENSIONS="
                f"{settings.EMBEDDING_DIMENSIONS}; run with --resize"
            )
        self.stdout.write(embeddings.describe())
        provider = embeddings.load(
            settings.EMBEDDING_PROVIDER,
            settings.EMBEDDING_LOCAL_MODEL,
            threads=max(1, options["threads"]),
        )
        done = vectors.embed_pending(
            everything=options["all"],
            progress=ProgressBar(sys.stderr),
            provider=provider,
            processes=max(1, options["threads"]),
        )
        self.stdout.write(
            f"embedded {done} lesson(s); {Lesson.objects.filter(embedding__isnull=True).count()} without a vector"
        )

    def import_(self, options: dict[str, Any]) -> None:
        path: Path = options["path"]
        if self._format(options) == "jsonl":
            report = interchange.import_jsonl(path)
        else:
            slug = options["workspace"]
            if slug and not re.match(SLUG_RE, slug):
                raise CommandError(
                    f"--workspace {slug[:40]!r} is not a workspace slug (lower-case letters, digits, '.', '_', '-')"
                )
            workspace = Workspace.objects.for_slug(slug) if slug else None
            report = interchange.import_memory_index(path, workspace=workspace)
        AuditEvent.record("lessons.import", object_type="lesson", result=report.__dict__, reason=str(path))
        self.stdout.write(
            f"imported {path}: {report.created} created, {report.reinforced} reinforced, {report.unchanged} unchanged"
            + (f", {report.skipped_other_facts} non-lesson fact(s) left alone" if report.skipped_other_facts else "")
        )

    def export(self, options: dict[str, Any]) -> None:
        path: Path = options["path"]
        fmt = self._format(options)
        if fmt == "jsonl":
            count = interchange.export_jsonl(path)
        elif fmt == "lessons-md":
            generated = interchange.generated_lessons()
            if options["workspace"]:
                generated = generated.filter(workspace__slug=options["workspace"])
            count = interchange.export_lessons_md(path, generated)
        else:
            lessons = Lesson.objects.active().select_related("workspace").order_by("-score", "id")
            if options["workspace"]:
                lessons = lessons.filter(workspace__slug=options["workspace"])
            count = interchange.export_memory_index(path, lessons)
        AuditEvent.record("lessons.export", object_type="lesson", result={"count": count}, reason=str(path))
        self.stdout.write(f"exported {count} lesson(s) to {path}")
