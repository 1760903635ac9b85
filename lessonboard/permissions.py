"""Server-side permission checks for views: the UI may hide a button, the server always refuses."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse


def needs_role(perm: str) -> str:
    """The 403's sentence: which roles may do this (the 403 page shows it)."""
    from lessonboard.roles import roles_with

    roles = roles_with(perm)
    if not roles:
        return f"This action needs the permission {perm}."
    return f"This action needs the {' or '.join(roles)} role."


def require_perm(perm: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """403 (not a login redirect) for a logged-in user without ``perm``; the login middleware has
    already sent anonymous users to the login page."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.has_perm(perm):
                raise PermissionDenied(needs_role(perm))
            return view(request, *args, **kwargs)

        # Read by the permission matrix (tests/lessonboard/test_permission_matrix.py) to know what to probe.
        wrapper.required_permission = perm  # type: ignore[attr-defined]
        return wrapper

    return decorator


view_required = require_perm("lessonboard.view_dashboard")
