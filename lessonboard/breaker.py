"""Moved to ``lessonboard.llm.breaker``; this name stays an alias of that module (same object, so
``from lessonboard import breaker`` and monkeypatching keep working)."""

import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see: the moved module's names
    from lessonboard.llm.breaker import *  # noqa: F403
    from lessonboard.llm.breaker import (  # noqa: F401
        OPEN_STATES,
        RECOVERY_HOOKS,
        Outage,
        _outage_of,
        endpoint,
        gate,
        is_open,
        outage,
        probe,
        record_failure,
        record_success,
    )
else:
    sys.modules[__name__] = importlib.import_module("lessonboard.llm.breaker")
