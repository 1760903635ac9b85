"""``manage.py lessonq import DIR``: adopt a chatcli reflexion base dir (its wal/ and dlq/ records).
``manage.py lessonq adopt NODE [--now]``: adopt a dead node's active and dead jobs into this node
(docs/deployment.md#node-dies)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lessonboard.models import AuditEvent
from lessonq.adoption import AdoptionError, import_base_dir


class Command(BaseCommand):
    help = (
        "Lesson queue maintenance. `import DIR` adopts a chatcli reflexion base dir (idempotent); "
        "`adopt NODE` adopts a dead node's active and dead jobs into this node."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        imp = sub.add_parser("import", help="adopt DIR/wal and DIR/dlq (chatcli's .chatcli/reflexion)")
        imp.add_argument("directory", type=Path)
        imp.add_argument("--json", action="store_true", help="machine-readable output")
        adopt = sub.add_parser("adopt", help="adopt the active and dead jobs of NODE (its lease must have run out)")
        adopt.add_argument("node", help="the node's name (LESSONBOARD_NODE) or its queue lessonq.<node>")
        adopt.add_argument(
            "--now",
            action="store_true",
            help="adopt even while its lease is live: retire it (stop it first); without --now a live node gives nothing",
        )

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "adopt":
            self.adopt(options["node"], now=options["now"])
            return
        try:
            report = import_base_dir(options["directory"])
        except (AdoptionError, OSError) as exc:
            raise CommandError(f"import failed: {exc}") from exc
        AuditEvent.record(
            "queue.import",
            object_type="job",
            result={"directory": str(options["directory"]), **report.as_dict()},
            reason="manage lessonq import",
        )
        if options.get("json"):
            self.stdout.write(json.dumps(report.as_dict(), sort_keys=True))
            return
        self.stdout.write(
            f"imported {report.active} pending and {report.dead} dead job(s); "
            f"{report.known} already known; {report.quarantined} corrupt record(s) quarantined"
        )

    def adopt(self, node: str, *, now: bool) -> None:
        from django.conf import settings

        from lessonq import failover, reconcile

        queue = node if node.startswith("lessonq.") else f"lessonq.{node}"
        if queue == settings.LESSONQ_QUEUE:
            raise CommandError(f"{queue} is this node: run the command on the node that takes its jobs over")
        adopted = failover.adopt(queue, force=now)
        AuditEvent.record(
            "queue.adopt",
            object_type="node",
            object_ids=[queue],
            result={"adopted": adopted, "into": settings.LESSONQ_QUEUE, "forced": now},
            reason="manage lessonq adopt",
        )
        if adopted:
            reconcile.sweep()  # dispatch them within this node's capacity
        self.stdout.write(f"adopted {adopted} job(s) (active and dead) of {queue} into {settings.LESSONQ_QUEUE}")
