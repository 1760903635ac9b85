from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lessonboard.models import AuditEvent, TokenScope
from lessonboard.tokens import issue_token


class Command(BaseCommand):
    help = "Create an agent API token and print it once (only its hash is stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="a name for the agent or harness using the token")
        parser.add_argument(
            "--scope",
            action="append",
            choices=TokenScope.values,
            default=None,
            help="scope to grant; repeat for several (default: ingest)",
        )
        parser.add_argument(
            "--workspace",
            action="append",
            default=None,
            help="bind the token to this workspace; repeat for several (default: any workspace)",
        )
        parser.add_argument(
            "--may-create-workspaces",
            action="store_true",
            help="let an ingest token create a workspace by naming a new one (full tokens always may)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            issued = issue_token(
                options["name"],
                options["scope"] or [TokenScope.INGEST],
                workspaces=options["workspace"] or [],
                may_create_workspaces=options["may_create_workspaces"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        AuditEvent.record(
            "token.create",
            object_type="agent_token",
            object_ids=[issued.token.pk],
            reason="manage.py create_agent_token",
        )
        self.stdout.write(f"Token for {issued.token.name} (scopes: {', '.join(issued.token.scopes)}):")
        self.stdout.write(issued.plaintext)
        self.stderr.write("Store it now: it is not shown again. Use it as 'Authorization: Bearer <token>'.")
