"""The state of everything lessonboard depends on, for the Overview: database, broker, LLM, workers and
beat, each with its detail and the last error seen (kept in the cache for a day, so a flap that healed
still shows what happened and when).

The readiness checks of ``lessonboard.health`` answer for the database and the broker; workers are
alive when a node's worker holds its lease (``lessonq.presence``) or its heartbeat is fresh; beat is
alive when some beat holds the scheduler's leader lease (``lessonq.leader``); the LLM is asked for its model list with a short timeout. The whole answer
is cached a few seconds: every open Overview polls it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC
from typing import Any

import openai
from django.core.cache import cache
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from lessonboard import health, llm
from lessonboard.models import WorkerHeartbeat
from lessonboard.overview import WORKER_FRESH
from lessonq import leader, presence

STATES_KEY = "lessonboard:dependencies"
STATES_TTL = 10  # seconds
ERROR_TTL = 86400  # a last error is remembered for a day
LLM_PROBE_TIMEOUT = 2.0


@dataclass
class Dependency:
    name: str
    ok: bool
    detail: str
    last_error: str = ""
    last_error_at: str = ""  # ISO time

    @property
    def last_error_when(self) -> Any:
        return parse_datetime(self.last_error_at) if self.last_error_at else None


def _error_key(name: str) -> str:
    return f"lessonboard:dependency-error:{name}"


def _remember(dep: Dependency) -> Dependency:
    if not dep.ok:
        cache.set(_error_key(dep.name), {"error": dep.detail, "at": timezone.now().isoformat()}, ERROR_TTL)
    last = cache.get(_error_key(dep.name))
    if last:
        dep.last_error, dep.last_error_at = last["error"], last["at"]
    return dep


def probe_llm() -> tuple[bool, str]:
    if not llm.is_configured():
        return False, llm.status_text()
    try:
        llm.client(timeout=LLM_PROBE_TIMEOUT).models.list()
    except openai.APIStatusError as exc:
        # It answered: reachable. Only a refused key makes it unusable (some servers have no /models).
        if exc.status_code in (401, 403):
            return False, f"{llm.status_text()}: reachable, but the API key is refused (HTTP {exc.status_code})"
        return True, f"{llm.status_text()}: reachable (HTTP {exc.status_code} on /models)"
    except Exception as exc:  # any failure is the state to show, never a 500 on the Overview
        return False, f"{llm.status_text()}: unreachable ({type(exc).__name__}: {exc})"[:300]
    return True, f"{llm.status_text()}: reachable"


def _workers() -> tuple[bool, str]:
    """From the nodes' own leases (each node's worker renews its own): never "down" while one works."""
    states = presence.nodes()
    alive = [s.name for s in states if s.worker_live]
    gone = [f"{s.name} gone since {s.expires_at.astimezone(UTC):%H:%M:%S} UTC" for s in states if s.gone]
    if alive:
        return True, f"{len(alive)} node(s) with a live worker: {', '.join(alive)}" + (
            f"; {'; '.join(gone)}" if gone else ""
        )
    fresh = WorkerHeartbeat.objects.filter(last_seen__gte=timezone.now() - WORKER_FRESH).count()
    if fresh:
        return True, f"{fresh} worker{'s' if fresh != 1 else ''} answered in the last 2 minutes"
    newest = WorkerHeartbeat.objects.order_by("-last_seen").first()
    return False, "no worker answered in the last 2 minutes" + (
        f" (last: {newest.hostname} at {newest.last_seen.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC)" if newest else ""
    )


def _beat() -> tuple[bool, str]:
    """The scheduler's leader lease (``lessonq.leader``): beat runs on every node, one of them leads."""
    return leader.check_scheduler()


def states() -> list[Dependency]:
    cached = cache.get(STATES_KEY)
    if cached is not None:
        return [Dependency(**row) for row in cached]
    probes = [
        ("database", health.check_database),
        ("broker", health.check_broker),
        ("LLM", probe_llm),
        ("workers", _workers),
        ("beat", _beat),
    ]
    result = []
    for name, probe in probes:
        try:
            ok, detail = probe()
        except Exception as exc:  # a probe that breaks reads as the dependency being down
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        result.append(_remember(Dependency(name, ok, detail)))
    cache.set(STATES_KEY, [asdict(d) for d in result], STATES_TTL)
    return result
