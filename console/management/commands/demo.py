"""``python3 lb.py manage demo`` seeds the demo workspace; ``--remove`` deletes it (see console/demo.py)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from console import demo


class Command(BaseCommand):
    help = "Seed a clearly marked demo workspace with sample data, or remove it (--remove)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--remove", action="store_true", help="delete the demo workspace and all its data")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["remove"]:
            done = demo.remove()
            self.stdout.write(
                f"Demo data removed: {done.jobs} jobs, {done.lessons} lessons, {done.proposals} proposals, "
                f"{done.refine_runs} refine run(s), {done.doc_rewrites} doc rewrite(s)."
            )
            return
        seeded = demo.seed()
        if not seeded.created:
            self.stdout.write("The demo workspace already exists; nothing seeded. Remove it with --remove.")
            return
        jobs = ", ".join(f"{n} {state}" for state, n in sorted(seeded.jobs.items()))
        self.stdout.write(
            f"Demo workspace '{demo.SLUG}' seeded: jobs ({jobs}), {seeded.lessons} lessons, "
            f"{seeded.proposals} pending proposals, {seeded.refine_runs} refine run, "
            f"{seeded.doc_rewrites} doc rewrite waiting for a reviewer.\n"
            + "".join(f"Not seeded: {what}.\n" for what in seeded.skipped)
            + "Remove it with: python3 lb.py manage demo --remove"
        )
