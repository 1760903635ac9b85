"""Self-Refine: the pass loop, scorers, runs and compare pages (docs/architecture.md#layering). It may
import the foundation (``lessonboard``), ``lessons`` (the low-quality lesson a run proposes) and
``lessonq`` (the Reflexion job a low-quality run queues)."""
