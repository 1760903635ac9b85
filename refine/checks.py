"""System checks: a refine setting that would only fail inside a worker fails at start-up instead."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured


@register()
def check_embedder(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    if not settings.REFINE_CONVERGENCE_EMBEDDING:
        return []
    from refine.embedder import resolve_embedder

    try:
        resolve_embedder()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="refine.E001")]
    return []
