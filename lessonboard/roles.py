"""Roles are groups with permissions. Apps add their own permission codenames to ``ROLE_PERMISSIONS``'s
lists here, and ``sync_roles`` (run after every migrate) brings the groups in line."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, Permission

VIEWER, OPERATOR, REVIEWER, ADMIN = "viewer", "operator", "reviewer", "admin"
ROLES = (VIEWER, OPERATOR, REVIEWER, ADMIN)

# "app_label.codename" per role; each role includes what the roles before it have where that makes sense.
_VIEW = ["lessonboard.view_dashboard"]
ROLE_PERMISSIONS: dict[str, list[str]] = {
    VIEWER: [*_VIEW],
    OPERATOR: [*_VIEW, "lessonboard.operate_queue"],
    REVIEWER: [*_VIEW, "lessonboard.review_memory"],
    ADMIN: [*_VIEW, "lessonboard.operate_queue", "lessonboard.review_memory", "lessonboard.manage_tokens"],
}


def sync_roles(**kwargs: Any) -> None:
    """Create the role groups and set exactly their permissions (idempotent)."""
    for role, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        wanted = []
        for dotted in perms:
            app_label, codename = dotted.split(".", 1)
            perm = Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()
            if perm is not None:  # a permission of an app not migrated yet appears on the next migrate
                wanted.append(perm)
        group.permissions.set(wanted)


def assign_role(user: Any, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    sync_roles()
    user.groups.add(Group.objects.get(name=role))
    if role == ADMIN:
        user.is_staff = True
        user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])


def roles_with(perm: str) -> list[str]:
    """The roles granting ``perm`` ("lessonboard.review_memory" → ["reviewer", "admin"]), for a 403 page
    that says which role to ask for."""
    return [role for role in ROLES if perm in ROLE_PERMISSIONS[role]]


def roles_of(user: Any) -> list[str]:
    if not getattr(user, "is_authenticated", False):
        return []
    return sorted(user.groups.filter(name__in=ROLES).values_list("name", flat=True), key=ROLES.index)
