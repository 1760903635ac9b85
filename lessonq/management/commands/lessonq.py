"""``manage.py lessonq import DIR``: adopt a chatcli reflexion base dir (its wal/ and dlq/ records)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lessonq.adoption import AdoptionError, import_base_dir


class Command(BaseCommand):
    help = "Lesson queue maintenance. `import DIR` adopts a chatcli reflexion base dir (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        imp = sub.add_parser("import", help="adopt DIR/wal and DIR/dlq (chatcli's .chatcli/reflexion)")
        imp.add_argument("directory", type=Path)
        imp.add_argument("--json", action="store_true", help="machine-readable output")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        try:
            report = import_base_dir(options["directory"])
        except (AdoptionError, OSError) as exc:
            raise CommandError(f"import failed: {exc}") from exc
        if options.get("json"):
            self.stdout.write(json.dumps(report.as_dict(), sort_keys=True))
            return
        self.stdout.write(
            f"imported {report.active} pending and {report.dead} dead job(s); "
            f"{report.known} already known; {report.quarantined} corrupt record(s) quarantined"
        )
