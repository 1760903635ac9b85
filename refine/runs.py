"""Refine runs: starting one (with the agent's mode and chatcli's preconditions), executing it in the
worker (claim → pass loop → record every pass), picking another pass as the output, setting an agent's
mode, and proposing a pass as a lesson."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lessonboard import breaker
from lessonboard.celery import app
from lessonboard.models import AgentToken, AuditEvent, Workspace
from refine import metrics
from refine.convergence import Checker, process_cascade
from refine.models import AgentRefineMode, RefineMode, RefinePass, RefineRun, RunStatus
from refine.passes import PassRecord, RefineConfig, RefinerFn, run_passes, skip_reason
from refine.refiner import REFINER_PROMPT, Refiner

log = logging.getLogger(__name__)

# A run still "running" this long after it started lost its worker (acks_late redelivers the message).
STALE_RUNNING = timedelta(minutes=10)
RUN_REFINE = "refine.tasks.run_refine"  # the task (refine/tasks.py) and its queue
RUN_REFINE_QUEUE = "llm"


def mode_decision(agent: str, workspace: Workspace | None = None) -> tuple[bool, str]:
    """Whether the agent's mode (in ``workspace``) lets this run refine, and why not. ``once`` is consumed here."""
    key = agent.strip().lower()
    mode = AgentRefineMode.objects.mode_for(key, workspace)
    if mode == RefineMode.OFF:
        return False, f"refine is off for agent '{key}'"
    if mode == RefineMode.ONCE:
        AgentRefineMode.objects.filter(agent=key, workspace=workspace, mode=RefineMode.ONCE).update(
            mode=RefineMode.AUTO, updated_at=timezone.now()
        )
        return True, ""
    if mode == RefineMode.AUTO and not settings.REFINE_ENABLED:
        return False, "refine is disabled (LESSONBOARD_REFINE_ENABLED=false) and the agent's mode is auto"
    return True, ""


@transaction.atomic
def start_run(
    *,
    task: str,
    draft: str,
    agent: str = "",
    max_passes: int | None = None,
    token: AgentToken | None = None,
    workspace: Workspace | None = None,
) -> RefineRun:
    """Record a run and publish it to the ``llm`` queue after commit, or record it as skipped (output =
    the draft) when the agent's mode or chatcli's preconditions say no."""
    config = RefineConfig.from_settings(max_passes=max_passes)
    run = RefineRun(
        task=task,
        original_draft=draft,
        agent=agent.strip(),
        max_passes=config.max_passes if config.max_passes > 0 else 1,
        requested_by=token,
        workspace=workspace,
        reflexion=reflexion_on_low_quality(),
    )
    allowed, why = mode_decision(agent, workspace)
    why = why or skip_reason(agent=agent, draft=draft, config=config)
    if not allowed or why:
        now = timezone.now()
        run.status, run.skip_reason, run.final_output = RunStatus.SKIPPED, why, draft
        run.started_at = run.finished_at = now
        run.duration_ms = 0
        run.save()
        metrics.RUNS.labels(outcome="skipped").inc()
        return run
    run.save()
    # Sent by name: refine.tasks imports this module, not the other way round.
    transaction.on_commit(lambda: app.send_task(RUN_REFINE, args=[run.pk], queue=RUN_REFINE_QUEUE))
    return run


def claim(run_id: int) -> RefineRun | None:
    now = timezone.now()
    claimed = (
        RefineRun.objects.filter(pk=run_id)
        .claimable(now - STALE_RUNNING)
        .update(status=RunStatus.RUNNING, started_at=now)
    )
    if not claimed:
        return None
    run = RefineRun.objects.get(pk=run_id)
    run.passes.all().delete()  # a re-claimed stale run starts over
    return run


def execute_run(
    run_id: int, *, refiner: RefinerFn | None = None, checker: Checker | bool | None = True
) -> RefineRun | None:
    """Claim the run and do its passes, saving each pass as it completes. ``checker=True`` means this
    process's configured cascade (``None`` when convergence is off). Returns ``None`` when the run was
    not claimable (finished already, or another worker has it)."""
    run = claim(run_id)
    if run is None:
        log.info("refine run %s not claimable; skipping", run_id)
        return None
    cascade = process_cascade() if checker is True else (None if isinstance(checker, bool) else checker)
    config = RefineConfig.from_settings(max_passes=run.max_passes)

    def save_pass(record: PassRecord) -> None:
        reply = record.reply
        RefinePass.objects.create(
            run=run,
            number=record.number,
            critique=reply.critique,
            critique_bullets=reply.bullets,
            revised=reply.output,
            raw_reply=reply.raw,
            protocol_ok=reply.protocol_ok,
            similarity_to_original=record.similarity_to_original,
            best_similarity=record.best_similarity,
            scores=record.scores,
            guard_check=record.guard.as_dict() if record.guard else None,
            convergence_check=record.convergence.as_dict() if record.convergence else None,
            converged=record.converged,
            decision=record.decision,
            decided_by=record.decided_by,
            reason=record.reason,
            degraded_from=record.degraded_from,
            latency_ms=record.latency_ms,
            model=reply.model,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
        )
        metrics.PASSES.labels(decision=record.decision, decided_by=record.decided_by or "none").inc()
        metrics.PASS_SECONDS.observe(record.latency_ms / 1000)

    from lessonboard.llm import usage

    try:
        with usage.context(
            purpose="refine",
            workspace=run.workspace.slug if run.workspace_id and run.workspace else "",
            agent=run.agent,
            prompt=REFINER_PROMPT.name,
            version=REFINER_PROMPT.version,
            refine_run_id=run.pk,
        ):
            result = run_passes(
                task=run.task,
                draft=run.original_draft,
                refiner=refiner or Refiner(),
                checker=cascade,
                config=config,
                on_pass=save_pass,
            )
    except Exception as exc:
        # Not a refiner error (those stop the loop inside run_passes): a bug or a broken embedder
        # setting. Record it so the run does not sit in "running" until the sweep retries it forever;
        # if the database itself is down this save fails too and the sweep picks the run up later.
        finished = timezone.now()
        run.status, run.error, run.final_output = RunStatus.FAILED, f"internal error: {exc!r}", run.original_draft
        run.finished_at = finished
        run.pass_count = run.passes.count()
        run.save(update_fields=["status", "error", "final_output", "finished_at", "pass_count"])
        metrics.RUNS.labels(outcome="failed").inc()
        raise
    outage = breaker.outage() if result.error and not result.passes else None
    if outage is not None:
        # The LLM went away before the first pass: not the run's fault. It waits, queued, and the
        # breaker's recovery (or the stalled-run sweep) publishes it again.
        run.status, run.started_at, run.error = RunStatus.QUEUED, None, f"waiting: {outage.text}"
        run.save(update_fields=["status", "started_at", "error"])
        return run
    from lessonboard.llm import ratelimit

    pause = ratelimit.current() if result.error and not result.passes else None
    if pause is not None:
        # The provider's rate limit before the first pass: the run waits, queued, and comes back when the
        # pause ends (docs/operations.md#llm-rate-limit).
        run.status, run.started_at, run.error = RunStatus.QUEUED, None, f"waiting: {pause.text}"
        run.save(update_fields=["status", "started_at", "error"])
        countdown = pause.seconds() + 0.05
        transaction.on_commit(
            lambda: app.send_task(RUN_REFINE, args=[run.pk], queue=RUN_REFINE_QUEUE, countdown=countdown)
        )
        return run
    finished = timezone.now()
    run.final_output = result.output
    run.output_pass = _pass_number_of(run, result.output)
    run.converged, run.rolled_back = result.converged, result.rolled_back
    run.low_quality, run.low_quality_reason = result.low_quality, result.low_quality_reason
    run.stop_reason, run.error = result.stop_reason, result.error  # also clears an earlier "waiting: …"
    run.pass_count = len(result.passes)
    run.prompt_tokens = sum(p.reply.prompt_tokens for p in result.passes)
    run.completion_tokens = sum(p.reply.completion_tokens for p in result.passes)
    run.status = RunStatus.FAILED if result.error and not result.passes else RunStatus.DONE
    run.finished_at = finished
    run.duration_ms = (finished - (run.started_at or finished)).total_seconds() * 1000
    if run.low_quality and run.reflexion:
        # Before the run reads as finished: whoever sees it done also sees its lesson job.
        queue_low_quality_lesson(run)
    run.save()
    metrics.RUNS.labels(outcome=run.outcome).inc()
    return run


def reflexion_on_low_quality() -> bool:
    """Whether a run that ends low-quality queues its own lesson job: the queue is on, its ``low_quality``
    trigger is on (chatcli's ``…_REFLEXION_ON_LOW_QUALITY``), and the server-side forwarding is on."""
    return settings.LESSONQ_ENABLED and settings.LESSONQ_ON_LOW_QUALITY and settings.REFINE_REFLEXION_ON_LOW_QUALITY


def queue_low_quality_lesson(run: RefineRun) -> str:
    """Queue the ``low_quality`` lesson job the agent would have sent with the run's metadata (same task,
    attempt and outcome text, so the same JobID: an agent that forwards the flag as well is deduplicated).
    Returns the job id, or ``""`` when the WAL could not take it (logged; the run itself is done)."""
    from lessonq.ingest import AgentResult, LessonRequest, enqueue, outcome_text
    from lessonq.models import Trigger
    from lessonq.wal import WalError

    result = AgentResult(task=run.task, output=run.final_output, error="", metadata=run.metadata)
    request = LessonRequest(
        task=run.task, attempt=run.final_output, outcome=outcome_text(result), trigger=Trigger.LOW_QUALITY.value
    )
    try:
        queued = enqueue(request, agent=run.agent, workspace=run.workspace, token=run.requested_by)
    except (OSError, WalError):
        log.warning("refine: run %s ended low-quality but its lesson job could not be queued", run.pk, exc_info=True)
        return ""
    run.reflexion_job = queued.job_id  # saved with the finished run
    return queued.job_id


def _pass_number_of(run: RefineRun, text: str) -> int:
    """The last pass whose text is the output (0 when it is the original)."""
    number = run.passes.filter(revised=text).order_by("-number").values_list("number", flat=True).first()
    return number or 0


def choose_output(run: RefineRun, number: int, *, user: Any) -> None:
    previous = run.output_pass
    with transaction.atomic():  # the action and its audit event commit together
        run.choose_output(number, user=user)
        AuditEvent.record(
            "refine.choose_output",
            user=user,
            object_type="refine_run",
            object_ids=[run.pk],
            result={"output_pass": number, "previous_output_pass": previous},
        )


def set_mode(
    agent: str, mode: str, *, user: Any = None, token: AgentToken | None = None, workspace: Workspace | None = None
) -> AgentRefineMode:
    key = agent.strip().lower()
    row, _ = AgentRefineMode.objects.update_or_create(
        agent=key,
        workspace=workspace,
        defaults={
            "mode": mode,
            "updated_at": timezone.now(),
            "updated_by": user if user is not None and getattr(user, "is_authenticated", False) else None,
            "updated_by_token": token,
        },
    )
    AuditEvent.record(
        "refine.set_mode",
        user=user,
        token=token,
        object_type="refine_agent_mode",
        object_ids=[key],
        result={"mode": mode, "workspace": workspace.slug if workspace else None},
    )
    return row


@transaction.atomic
def propose_lesson(
    refine_pass: RefinePass, *, situation: str, mistake: str, correction: str, tags: list[str], user: Any
) -> Any:
    """Stage a lesson drawn from a pass as a pending proposal in the approval queue (target ``lesson``,
    op ``add``, human gate): a reviewer approves, edits or rejects it there, and approval writes through
    ``lessons.store.persist_lesson``. Returns the proposal, or ``None`` when it could not be staged."""
    from lessonboard.models import Workspace
    from lessons.review.staging import stage_lesson

    run = refine_pass.run
    origin = f"refine run {run.pk} pass {refine_pass.number}"
    # The run's own workspace, so the lesson is served where the run came from (docs/lessons.md#scopes); only
    # a run that named no workspace falls back to LESSONBOARD_REFINE_PROPOSAL_WORKSPACE.
    workspace = run.workspace or Workspace.objects.for_slug(settings.REFINE_PROPOSAL_WORKSPACE)
    proposal = stage_lesson(
        workspace,
        situation=situation,
        mistake=mistake,
        correction=correction,
        tags=tags,
        trigger="low_quality",
        origin=origin,
        summary=f"Lesson proposed from {origin}.\n\nTask: {run.task}",
        agent=run.agent,
        user=user,
    )
    AuditEvent.record(
        "refine.propose_lesson",
        user=user,
        object_type="refine_pass",
        object_ids=[refine_pass.pk],
        result={"proposal": proposal.pk if proposal else None, "status": proposal.status if proposal else "error"},
    )
    return proposal


def lesson_draft(refine_pass: RefinePass) -> dict[str, str]:
    """Pre-filled lesson fields for "propose as a lesson": the task is the situation, the critique the
    mistake, the revision the correction."""
    run = refine_pass.run
    bullets = refine_pass.critique_bullets or []
    return {
        "situation": run.task[:500],
        "mistake": "; ".join(bullets)[:1000] or "the draft needed refining",
        "correction": refine_pass.revised[:2000],
        "tags": ", ".join(t for t in ("refine", run.agent.lower()) if t),
    }
