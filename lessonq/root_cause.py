"""A lesson from a DLQ root cause: the draft a person starts from when a dead job (or a whole error group)
shows something agents should learn, staged as a pending lesson proposal for a reviewer.

The draft takes the task as the situation and the errors as the mistake (the last error, then the distinct
errors of the attempts, or for a group its normalised error, how often it died and a few example tasks);
the correction is the person's to write. Lengths are cut to what a lesson proposal holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lessonboard.models import AuditEvent, Workspace
from lessonq.models import Job

SITUATION_MAX = 2000  # a lesson proposal's field limits (lessons.review.proposals.LessonFields)
MISTAKE_MAX = 2000


@dataclass
class Draft:
    situation: str
    mistake: str
    correction: str = ""
    tags: list[str] = field(default_factory=list)
    trigger: str = "error"
    origin: str = ""
    agent: str = ""
    workspace: str = ""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def draft_from_job(job: Job) -> Draft:
    errors: list[str] = []
    for error in [job.last_error, *job.attempt_rows.order_by("-number").values_list("error", flat=True)]:
        error = (error or "").strip()
        if error and error not in errors:
            errors.append(error)
    lines = [f"{job.trigger} after {job.attempts} attempt{'s' if job.attempts != 1 else ''}:"]
    lines += [f"- {error}" for error in errors[:5]]
    if job.outcome:
        lines.append(f"Outcome: {job.outcome}")
    return _draft(job, lines, origin=f"dlq job {job.pk}")


def draft_from_group(fingerprint: str) -> Draft | None:
    """The draft for an error group: its newest dead job's task, the group's error and its size and other
    tasks in that job's workspace. A group spans workspaces (its fingerprint is the error's), but the
    lesson goes to one: another workspace's tasks must not end up in its text, which that workspace's
    agents are served."""
    newest = Job.objects.dead().filter(fingerprint=fingerprint).order_by("-finished_at", "-enqueued_at").first()
    if newest is None:
        return None
    dead = Job.objects.dead().filter(fingerprint=fingerprint, workspace=newest.workspace)
    total = dead.count()
    examples = list(dead.order_by("-finished_at").values_list("task", flat=True).distinct()[:4])
    lines = [
        f"{newest.trigger} — {newest.error_signature or newest.last_error} ({total} dead job{'s' if total != 1 else ''})"
    ]
    lines += [f"- also: {_cut(task, 200)}" for task in examples if task != newest.task][:3]
    return _draft(newest, lines, origin=f"dlq group {fingerprint}")


def _draft(job: Job, mistake_lines: list[str], *, origin: str) -> Draft:
    """A draft whose situation, tags, trigger, agent and workspace come from ``job``."""
    return Draft(
        situation=_cut(job.task.strip() or "(no task text)", SITUATION_MAX),
        mistake=_cut("\n".join(mistake_lines), MISTAKE_MAX),
        tags=["dlq", f"trigger:{job.trigger}"],
        trigger=str(job.trigger) or "error",
        origin=origin,
        agent=job.agent,
        workspace=job.workspace.slug if job.workspace_id and job.workspace else "",
    )


def propose(draft: Draft, *, user: Any) -> Any:
    """Stage the (person-edited) draft as a pending lesson proposal; audited as ``queue.propose_lesson``."""
    from lessons.review.staging import stage_lesson

    # The job named no workspace: the lesson goes to the `default` workspace (workspace scope, not the shared
    # tier; a person shares it from its page when it holds for every team).
    slug = draft.workspace or "default"
    proposal = stage_lesson(
        Workspace.objects.for_slug(slug),
        situation=draft.situation,
        mistake=draft.mistake,
        correction=draft.correction,
        tags=draft.tags,
        trigger=draft.trigger,
        origin=draft.origin,
        summary=f"Lesson proposed from {draft.origin}.\n\nTask: {draft.situation}",
        agent=draft.agent,
        user=user,
    )
    AuditEvent.record(
        "queue.propose_lesson",
        user=user,
        object_type="queue.job" if draft.origin.startswith("dlq job") else "queue.error_group",
        object_ids=[draft.origin.split(" ")[-1]],
        result={"proposal": proposal.pk if proposal else None, "status": proposal.status if proposal else "error"},
    )
    return proposal
