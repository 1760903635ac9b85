from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lessonboard.models import AuditEvent
from lessonboard.roles import ROLES, assign_role


class Command(BaseCommand):
    help = "Create a user with a role (viewer, operator, reviewer, admin); prints a generated password."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, required=True)
        parser.add_argument("--password", help="default: a generated one, printed once")
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        username = options["username"].strip()
        if not username:
            raise CommandError("username must not be empty")
        if User.objects.filter(username=username).exists():
            raise CommandError(f"user {username!r} already exists")
        password = options["password"] or secrets.token_urlsafe(12)
        user = User.objects.create_user(username=username, email=options["email"], password=password)
        assign_role(user, options["role"])
        AuditEvent.record(
            "user.create",
            object_type="user",
            object_ids=[user.pk],
            result={"username": username, "role": options["role"]},
            reason="manage create_user",
        )
        self.stdout.write(f"Created {options['role']} {username!r}.")
        if not options["password"]:
            self.stdout.write(f"password: {password}")
