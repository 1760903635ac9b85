"""The durable Reflexion queue (app label ``queue``): WAL, ingest, processing, DLQ and triage
(docs/architecture.md#layering). It may import the foundation (``lessonboard``) and ``lessons`` (the
lesson store its jobs write to)."""
