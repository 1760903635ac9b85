"""Server-side permission checks for views: the UI may hide a button, the server always refuses."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse


def require_perm(perm: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """403 (not a login redirect) for a logged-in user without ``perm``; the login middleware has
    already sent anonymous users to the login page."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.has_perm(perm):
                raise PermissionDenied(f"needs permission {perm}")
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


view_required = require_perm("lessonboard.view_dashboard")
