"""Lessons and memory: the lesson store, embeddings and retrieval, gated memory writes (``review``), doc
reflection (``reflect``) and the usage log (``usage``) (docs/architecture.md#layering). It may import the
foundation (``lessonboard``) and no other app."""
