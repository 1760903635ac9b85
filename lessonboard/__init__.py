"""The foundation every app stands on: settings, env readers, urls, the embedded PostgreSQL and broker, the
Celery app, the LLM gateway, tokens, roles and permissions, middleware, the API plumbing
(docs/architecture.md#layering). It may import Django, the standard library and third-party packages,
and no app: apps reach it through registries (Overview counts, metrics collectors, LLM recovery hooks)."""

from lessonboard.celery import app as celery_app

__all__ = ["celery_app"]
