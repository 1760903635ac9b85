"""Outcomes: how a task went after lessons were served for it, and what that says about each lesson.

A lesson's **usefulness** is the mean, over the tasks it was served for that have an outcome, of
``success − baseline``, where ``baseline`` is the success rate of every reported task of the same agent
in the same workspace (an agent name is not an identity across tenants: outcomes reported in one
workspace never move another's baseline).
A lesson served to an agent that succeeds 90 % of the time earns little for a success and loses much for a
failure; one served to a struggling agent earns much for a success. It stays empty (NULL, shown as "—")
until ``USEFULNESS_MIN_SAMPLES`` outcomes exist: three samples say nothing.

A lesson is **flagged for review** when it has at least that many outcomes, at least
``USEFULNESS_FLAG_FAILURE_RATE`` of them were failures, and its usefulness is negative: it is served and
followed by failures more often than its agents fail anyway.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from lessons.usage.models import LessonUsage, Retrieval, Served

if TYPE_CHECKING:
    from lessonboard.models import AgentToken


class OutcomeError(Exception):
    def __init__(self, message: str, *, field: str = "retrieval_id", status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status


def report_outcome(retrieval_id: int, *, success: bool, note: str = "", token: AgentToken | None = None) -> Retrieval:
    """Record how the task of ``retrieval_id`` went (the latest report wins) and bring the usefulness of
    every lesson it served up to date. ``OutcomeError`` (404) for an unknown retrieval; (403) when
    ``token`` is bound to workspaces and the retrieval was neither its own nor in one of them."""
    with transaction.atomic():
        row = Retrieval.objects.select_for_update().filter(pk=retrieval_id).first()
        if row is None:
            raise OutcomeError(f"no retrieval {retrieval_id} (unknown, or older than the log keeps)", status=404)
        if token is not None and not _may_report(token, row):
            raise OutcomeError(
                f"this token is bound to workspace(s) {', '.join(token.workspaces)}; "
                f"retrieval {retrieval_id} was made for another workspace",
                status=403,
            )
        row.success = success
        row.outcome_note = note[: settings.RETRIEVAL_LOG_TASK_MAX]
        row.outcome_at = timezone.now()
        row.save(update_fields=["success", "outcome_note", "outcome_at"])
        refresh_usage(row.served.values_list("lesson_id", flat=True))
    return row


def _may_report(token: AgentToken, row: Retrieval) -> bool:
    """An unbound token reports on any retrieval; a bound one on its own and on its workspaces' ones."""
    return row.token_id == token.pk or token.may_name(row.workspace)


def baselines() -> dict[tuple[str, str], float]:
    """Each ``(workspace, agent)``'s success rate over all its reported tasks."""
    rows = (
        Retrieval.objects.with_outcome()
        .values("workspace", "agent")
        .annotate(n=Count("id"), ok=Count("id", filter=Q(success=True)))
    )
    return {(row["workspace"], row["agent"]): row["ok"] / row["n"] for row in rows if row["n"]}


# The transaction-level advisory locks that order refreshes of the same lessons (class, lesson id mod
# USAGE_LOCK_BUCKETS): a bounded number per transaction, whatever the number of lessons.
USAGE_LOCK = 0x75736167  # "usag"
USAGE_LOCK_BUCKETS = 1024


@transaction.atomic
def refresh_usage(lesson_ids: Iterable[int] | None = None) -> int:
    """Recompute outcomes, successes, usefulness and the review flag of these lessons (``None``: every
    lesson with an outcome) from the log; returns how many. An outcome moves its agent's baseline, which
    every lesson served to that agent depends on: the periodic ``refresh_all_usage`` task catches those up.

    Two refreshes of the same lesson run one after the other (its lock, taken before the log is read,
    held to the commit): each writes the lesson's counts whole, so two reports read side by side would
    each write what it saw without the other's outcome, and the later write would lose one."""
    served = Served.objects.filter(retrieval__success__isnull=False)
    if lesson_ids is None:
        ids = sorted(set(served.values_list("lesson_id", flat=True)))
    else:
        ids = sorted(set(lesson_ids))
        served = served.filter(lesson_id__in=ids)
    if lesson_ids is None:
        # Every lesson: one whose outcomes have all left the log (older than its retention) has none now,
        # as one that still has some is counted over those alone.
        LessonUsage.objects.exclude(lesson_id__in=served.values("lesson_id")).exclude(
            outcomes=0, successes=0, usefulness=None, flagged=False
        ).update(outcomes=0, successes=0, usefulness=None, flagged=False, updated_at=timezone.now())
    if not ids:
        return 0
    with connection.cursor() as cursor:  # in one order everywhere: no two refreshes wait for each other
        for bucket in sorted({pk % USAGE_LOCK_BUCKETS for pk in ids}):
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [USAGE_LOCK, bucket])
    base = baselines()
    samples: dict[int, list[tuple[tuple[str, str], bool]]] = defaultdict(list)
    rows = served.values_list("lesson_id", "retrieval__workspace", "retrieval__agent", "retrieval__success")
    for lesson_id, workspace, agent, success in rows:
        samples[lesson_id].append(((workspace, agent), bool(success)))
    minimum = settings.USEFULNESS_MIN_SAMPLES
    now = timezone.now()
    LessonUsage.objects.bulk_create([LessonUsage(lesson_id=pk) for pk in ids], ignore_conflicts=True)
    for pk in ids:
        outcomes = samples.get(pk, [])
        n = len(outcomes)
        ok = sum(1 for _, success in outcomes if success)
        usefulness = None
        if n >= minimum:
            # fsum and rounding: a usefulness of exactly zero is 0.0, not -4.4e-17 (which flagged it)
            usefulness = round(math.fsum((1.0 if ok_ else 0.0) - base.get(key, 0.5) for key, ok_ in outcomes) / n, 9)
        flagged = usefulness is not None and usefulness < 0 and (n - ok) / n >= settings.USEFULNESS_FLAG_FAILURE_RATE
        LessonUsage.objects.filter(lesson_id=pk).update(
            outcomes=n, successes=ok, usefulness=usefulness, flagged=flagged, updated_at=now
        )
    return len(ids)
