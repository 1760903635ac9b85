from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Field

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
        field = User._meta.get_field(User.USERNAME_FIELD)
        assert isinstance(field, Field)  # the user model's username: a column, not a relation
        try:  # the admin's and the login form's rules: at most 150 letters, digits and @.+-_
            field.run_validators(username)
        except ValidationError as exc:
            raise CommandError(f"username {username[:40]!r}: {' '.join(exc.messages)}") from exc
        if field.max_length and len(username) > field.max_length:
            raise CommandError(f"username has at most {field.max_length} characters ({len(username)} given)")
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
