"""Moved to ``lessonboard.llm.breaker``; this name stays an alias of that module (same object, so
``from lessonboard import breaker`` and monkeypatching keep working)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("lessonboard.llm.breaker")
