"""What the Overview page counts. Apps append a ``(label, callable, url name or None)`` to ``SECTIONS``
from their ``AppConfig.ready()``; each callable returns the number to show and must stay cheap."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from lessonboard.models import AgentToken, AuditEvent, WorkerHeartbeat, Workspace
from lessonboard.supervisor import down_children


@dataclass(frozen=True)
class Count:
    group: str
    label: str
    value: Callable[[], int]
    url_name: str | None = None
    query: str = ""  # appended to the URL: a count links to its own tab or filter, not the bare list

    def url(self) -> str | None:
        if self.url_name is None:
            return None
        return reverse(self.url_name) + (f"?{self.query}" if self.query else "")


WORKER_FRESH = timedelta(minutes=2)


def live_workers() -> int:
    return WorkerHeartbeat.objects.filter(last_seen__gte=timezone.now() - WORKER_FRESH).count()


SECTIONS: list[Count] = [
    Count("Platform", "Users", lambda: get_user_model().objects.filter(is_active=True).count(), None),
    Count("Platform", "Active agent tokens", lambda: AgentToken.objects.active().count(), None),
    Count("Platform", "Workspaces", lambda: Workspace.objects.count(), "reflect:workspaces"),
    Count("Platform", "Workers seen in the last 2 minutes", live_workers, None),
    Count("Platform", "Audit events", lambda: AuditEvent.objects.count(), None),
    # Children of `serve` (web, worker, beat) that exited and wait for their restart: /readyz says which.
    Count("Platform", "serve processes down (restarting)", lambda: len(down_children()), "readyz"),
]


def add(counts: Iterable[Count]) -> None:
    """Append an app's counts to ``SECTIONS``, each once however often its ``ready()`` runs."""
    known = {(c.group, c.label) for c in SECTIONS}
    SECTIONS.extend(c for c in counts if (c.group, c.label) not in known)


def collect() -> list[tuple[str, list[tuple[str, int, str | None]]]]:
    groups: dict[str, list[tuple[str, int, str | None]]] = {}
    for count in SECTIONS:
        groups.setdefault(count.group, []).append((count.label, count.value(), count.url()))
    return list(groups.items())
