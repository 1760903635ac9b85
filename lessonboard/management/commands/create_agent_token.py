from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
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

        parser.add_argument(
            "--for-user",
            default=None,
            metavar="USERNAME",
            help="the person the token belongs to: a proposal decision over the operator API records this user",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        owner = None
        if options["for_user"] is not None:
            owner = get_user_model().objects.filter(username=options["for_user"]).first()
            if owner is None:
                raise CommandError(f"no user {options['for_user']!r} (create it with create_user first)")
        try:
            issued = issue_token(
                options["name"],
                options["scope"] or [TokenScope.INGEST],
                created_by=owner,
                workspaces=options["workspace"] or [],
                may_create_workspaces=options["may_create_workspaces"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        AuditEvent.record(
            "token.create",
            object_type="agent_token",
            object_ids=[issued.token.pk],
            result={"for_user": owner.get_username()} if owner is not None else None,
            reason="manage.py create_agent_token",
        )
        self.stdout.write(f"Token for {issued.token.name} (scopes: {', '.join(issued.token.scopes)}):")
        self.stdout.write(issued.plaintext)
        self.stderr.write("Store it now: it is not shown again. Use it as 'Authorization: Bearer <token>'.")
