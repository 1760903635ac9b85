"""The console's periodic work: the maintained views its pages read (docs/api.md#limits)."""

from __future__ import annotations

from celery import shared_task

from console import inbox
from lessons.usage import gaps

REFRESH_DERIVED = "console.tasks.refresh_derived"


@shared_task(name=REFRESH_DERIVED, ignore_result=True)
def refresh_derived() -> dict[str, int]:
    """Beat (and soon after an input changes): the maintained views pages read instead of computing
    them, knowledge-gap groups first (the inbox lists them), then the inbox's waiting items."""
    return {"gap_groups": gaps.refresh(), "inbox_items": inbox.refresh()}
