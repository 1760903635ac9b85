"""What an empty install shows on its Overview: what to do next (connect an agent, load the demo data,
where the docs are), until the first job or lesson arrives."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from console import demo
from lessonboard import embedded
from lessonq.models import Job
from lessons.models import Lesson


@dataclass(frozen=True)
class FirstRun:
    token_command: str
    demo_command: str | None  # only where the demo belongs: the embedded database of a newcomer's machine
    base_url: str


def guide(base_url: str) -> FirstRun | None:
    """None once anything is there (a job, a lesson, or the demo workspace)."""
    if Job.objects.exists() or Lesson.objects.exists() or demo.exists():
        return None
    return FirstRun(
        token_command="python3 lb.py manage create_agent_token my-agent --scope full",
        demo_command="python3 lb.py manage demo" if embedded.in_use() else None,
        base_url=base_url.rstrip("/") or f"http://{settings.HOST}:{settings.PORT}",
    )
