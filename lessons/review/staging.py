"""Run a review pass for a workspace and keep everything it did: the run (summary, prompt version, the
proposer's raw output, how it ended) and one ``Proposal`` row per item in its bucket. ``pending`` rows are
hermes' staged approval records: the approval queue works through them (``lessons.review.decisions``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from lessonboard.models import AgentToken, AuditEvent, Workspace
from lessons.review.gates import GateFn, configured_gate
from lessons.review.learning import Item, LearnOutcome, Proposed, Proposer, ReviewPassError, review_and_learn
from lessons.review.metrics import PASS_FAILURES, PROPOSALS
from lessons.review.models import Decision, MemoryVersion, Proposal, ReviewRun, RunStatus
from lessons.review.proposer import PROMPT_VERSION, ProposerError, llm_proposer
from lessons.review.targets import WorkspaceStore


@dataclass
class RunResult:
    run: ReviewRun
    outcome: LearnOutcome | None
    error: ReviewPassError | None = None


def save_item(run: ReviewRun, position: int, item: Item) -> None:
    proposal = item.proposal
    verdict = item.verdict
    row = Proposal(
        run=run,
        position=position,
        workspace=run.workspace,
        agent=run.agent,
        target=proposal.target,
        op=proposal.op,
        content=proposal.content or "",
        old_text=proposal.old_text or "",
        lesson=proposal.lesson.model_dump() if proposal.lesson else {},
        rationale=proposal.rationale,
        score=proposal.score,
        agent_score=proposal.agent_score,
        original=proposal.as_dict(),
        status=item.bucket,
        gate=verdict.gate if verdict else "",
        gate_reason=(verdict.reason + (f" [{proposal.score_reason}]" if proposal.score_reason else ""))
        if verdict
        else "",
        auto_approve=verdict.auto_approve if verdict else False,
        decision=Decision.AUTO if item.bucket in ("applied", "failed", "rejected") else Decision.NONE,
        message=item.outcome.message if item.outcome else "",
    )
    if item.outcome is not None:
        ref = item.outcome.ref
        if isinstance(ref, MemoryVersion):
            row.memory_version = ref
        elif ref is not None and hasattr(ref, "lesson"):
            row.lesson_ref = ref.lesson
            row.lesson_action = ref.action
    if row.decision == Decision.AUTO:
        row.decided_at = row.created_at
    row.save()
    PROPOSALS.labels(row.target, row.status).inc()


def run_review(
    workspace: Workspace,
    summary: str,
    *,
    agent: str = "",
    proposer: Proposer | None = None,
    gate: GateFn | None = None,
    token: AgentToken | None = None,
    user: Any = None,
) -> RunResult:
    run = ReviewRun.objects.create(
        workspace=workspace, agent=agent, summary=summary, token=token, prompt_version=PROMPT_VERSION
    )
    actor = f"token:{token.name}" if token else (f"user:{user.get_username()}" if user else "review")
    store = WorkspaceStore(workspace, agent=agent, actor=actor)
    from lessonboard.llm import usage

    try:
        with usage.context(
            purpose="review", workspace=workspace.slug, agent=agent, prompt="propose", version=PROMPT_VERSION
        ):
            outcome = review_and_learn(
                summary,
                proposer=proposer or llm_proposer(workspace),
                gate=gate or configured_gate(workspace=workspace),
                store=store,
                record=lambda position, item: save_item(run, position, item),
            )
    except ReviewPassError as exc:
        cause = exc.__cause__
        run.status = RunStatus.ERROR
        run.error = exc.message
        if isinstance(cause, ProposerError):
            run.raw_output, run.model = cause.raw_output, cause.model
        run.save(update_fields=["status", "error", "raw_output", "model"])
        PASS_FAILURES.labels(exc.stage).inc()
        AuditEvent.record(
            "review.run",
            token=token,
            user=user,
            object_type="review_run",
            object_ids=[run.pk],
            result={"status": "error", "stage": exc.stage},
            reason=exc.message,
        )
        return RunResult(run, None, exc)
    if outcome.proposed is not None:
        run.raw_output = outcome.proposed.raw_output
        run.model = outcome.proposed.model
        run.prompt_version = outcome.proposed.prompt_version or run.prompt_version
        run.save(update_fields=["raw_output", "model", "prompt_version"])
    AuditEvent.record(
        "review.run",
        token=token,
        user=user,
        object_type="review_run",
        object_ids=[run.pk],
        result={name: len(outcome.bucket(name)) for name in ("applied", "rejected", "failed", "pending")},  # type: ignore[arg-type]
    )
    return RunResult(run, outcome)


def stage_lesson(
    workspace: Workspace,
    *,
    situation: str,
    mistake: str,
    correction: str,
    tags: list[str],
    trigger: str,
    origin: str,
    summary: str,
    agent: str = "",
    user: Any = None,
) -> Proposal | None:
    """Stage one lesson a person drew from somewhere (a refine pass, a dead job, an error group) as a
    pending proposal in the approval queue: target ``lesson``, op ``add``, always through the human gate,
    so a reviewer approves, edits or rejects it there and approval writes through
    ``lessons.store.persist_lesson``. ``None`` when the pass could not stage it (see the run's error)."""
    import json

    from lessons.review.gates import human_gate

    who = user.get_username() if user is not None else "system"
    item = {
        "target": "lesson",
        "op": "add",
        "lesson": {
            "situation": situation,
            "mistake": mistake,
            "correction": correction,
            "trigger": trigger,
            "tags": tags,
        },
        "rationale": f"promoted from {origin} by {who}",
        "score": 1.0,
    }
    result = run_review(
        workspace,
        summary,
        agent=agent,
        proposer=lambda _summary: Proposed(items=[item], raw_output=json.dumps(item), model=origin.split(" ")[0]),
        gate=human_gate(settings.REVIEW_THRESHOLD),
        user=user,
    )
    return result.run.proposals.first()
