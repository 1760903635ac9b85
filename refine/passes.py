"""The Self-Refine pass loop (docs/compat/chatcli.md#refine-preconditions) with its regression guard, as a plain function.

Collaborators come in as arguments — the refiner (which owns the LLM call), the convergence checker
(or ``None`` for the legacy char heuristic) and a clock for latencies — so tests hand in fakes of the
LLM reply and the same code runs in the Celery task.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from lessonboard.llm import LLMError
from refine.convergence import Check, Checker
from refine.refiner import RefinerReply
from refine.scorers import char_score, jaccard_score

ROLLBACK_RATIO = 0.85  # chatcli: roll back when similarity to the original drops more than 15 % below the best
DEFAULT_EPSILON = 50

RefinerFn = Callable[[str, str], RefinerReply]


@dataclass(frozen=True)
class RefineConfig:
    max_passes: int = 1
    min_bytes: int = 200
    epsilon: int = DEFAULT_EPSILON
    exclude: tuple[str, ...] = ("formatter", "deps", "refiner", "verifier")
    # chatcli bounds the whole refine hook by the pipeline's 30 s per-hook timeout; 0 = no cap.
    loop_timeout: float = 30.0
    # Not in chatcli: a rewrite whose similarity to the ORIGINAL (by the guard) is below this is rolled
    # back whatever the best pass was, pass 1 included; 0 = off.
    similarity_floor: float = 0.2

    @classmethod
    def from_settings(cls, *, max_passes: int | None = None) -> RefineConfig:
        return cls(
            max_passes=settings.REFINE_MAX_PASSES if max_passes is None else max_passes,
            min_bytes=settings.REFINE_MIN_BYTES,
            epsilon=settings.REFINE_EPSILON,
            exclude=tuple(settings.REFINE_EXCLUDE),
            loop_timeout=settings.REFINE_LOOP_TIMEOUT,
            similarity_floor=settings.REFINE_SIMILARITY_FLOOR,
        )


def skip_reason(*, agent: str, draft: str, config: RefineConfig) -> str:
    """Why chatcli's hook would not run (docs/compat/chatcli.md#refine-preconditions), or ``""`` when it would."""
    if agent.strip().lower() in {name.strip().lower() for name in config.exclude}:
        return f"agent '{agent.strip()}' is in the exclude list"
    size = len(draft.encode())
    if size < config.min_bytes:
        return f"draft is {size} bytes, below the minimum of {config.min_bytes}"
    return ""


def char_heuristic(a: str, b: str, epsilon: int) -> bool:
    """chatcli's legacy convergence test (docs/compat/chatcli.md#refine-legacy-char): not converged when the byte lengths differ by more
    than epsilon, or when more than epsilon code points differ position by position. The length
    difference itself is not counted as mismatches."""
    if epsilon <= 0:
        epsilon = DEFAULT_EPSILON
    if abs(len(a.encode()) - len(b.encode())) > epsilon:
        return False
    mismatches = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            mismatches += 1
            if mismatches > epsilon:
                return False
    return True


def display_scores(a: str, b: str, check: Check | None) -> dict[str, Any]:
    """Every scorer's view of (a, b) for the compare page: char and Jaccard always (they are cheap), the
    embedding score when the cascade consulted it."""
    scores: dict[str, Any] = {"char": char_score(a, b).as_dict(), "jaccard": jaccard_score(a, b).as_dict()}
    for entry in check.trail if check else []:
        if entry.scorer == "embedding":
            scores["embedding"] = {**entry.score.as_dict(), "error": entry.error}
    return scores


class Decision:
    CONVERGED = "converged"
    CONTINUE = "continue"
    ROLLED_BACK = "rolled_back"


@dataclass
class PassRecord:
    number: int  # 1-based
    reply: RefinerReply
    similarity_to_original: float
    best_similarity: float
    guard: Check | None
    convergence: Check | None
    converged: bool
    decision: str
    decided_by: str
    reason: str
    degraded_from: str
    scores: dict[str, Any]
    latency_ms: float


@dataclass
class LoopResult:
    output: str
    passes: list[PassRecord] = field(default_factory=list)
    converged: bool = False
    rolled_back: bool = False
    low_quality: bool = False
    low_quality_reason: str = ""
    stop_reason: str = ""
    error: str = ""

    @property
    def metadata(self) -> dict[str, str]:
        """chatcli's result metadata keys, plus ``refine_low_quality`` which chatcli never sets."""
        meta: dict[str, str] = {}
        if self.rolled_back:
            meta["refine_rolled_back"] = "true"
        if self.low_quality:
            meta["refine_low_quality"] = "true"
            meta["refine_low_quality_reason"] = self.low_quality_reason
        return meta


def run_passes(
    *,
    task: str,
    draft: str,
    refiner: RefinerFn,
    checker: Checker | None,
    config: RefineConfig,
    on_pass: Callable[[PassRecord], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> LoopResult:
    """Critique → rewrite up to ``max_passes`` times (docs/compat/chatcli.md#refine-pass).

    Per pass: the regression guard compares the rewrite with the ORIGINAL (a check error counts as 1.0);
    the first pass or a strictly better similarity becomes the best; a drop below 0.85 × best rolls
    back to the best draft and stops. Unlike chatcli, a pass that broke the critique/revise protocol (no
    ``<revised>``), or whose rewrite is below ``similarity_floor`` against the original, is rolled back
    too (to the best pass, or to the original on pass 1) and the run flagged low quality: the guard's
    ratio alone never checks pass 1. Otherwise the cascade (or the char heuristic when there is no
    checker or it errors) decides whether current → rewrite converged. A refiner error keeps the
    previous draft and stops.
    """
    max_passes = config.max_passes if config.max_passes > 0 else 1
    result = LoopResult(output=draft)
    current = draft
    best_draft, best_similarity = "", -1.0
    loop_started = clock()
    for index in range(max_passes):
        started = clock()
        if index and config.loop_timeout and started - loop_started >= config.loop_timeout:
            # The time budget is checked between passes: a pass in flight finishes (its LLM call has its
            # own timeout), none starts after the cap; the current draft stands, as after the last pass.
            result.stop_reason = (
                f"the loop's time budget of {config.loop_timeout:g} s ran out after {index} pass(es); "
                "kept the current draft"
            )
            break
        try:
            reply = refiner(task, current)
        except LLMError as exc:
            result.error = exc.message
            result.stop_reason = f"the refiner failed at pass {index + 1}: {exc.message}; kept the previous draft"
            break
        rewrite = reply.output
        previous = current
        guard = checker.check(draft, rewrite) if checker is not None else None
        similarity = 1.0 if guard is None or guard.error else guard.score.similarity
        broken = _broken(index + 1, reply, similarity, guard, config)
        if broken:
            result.rolled_back = True
            current = best_draft or draft
            best_draft = current
            record = _rolled_back(
                number=index + 1,
                reply=reply,
                similarity=similarity,
                best_similarity=best_similarity if best_similarity >= 0 else 1.0,
                guard=guard,
                reason=broken,
                scores={
                    "original": display_scores(draft, rewrite, guard),
                    "previous": display_scores(previous, rewrite, None),
                },
                latency_ms=(clock() - started) * 1000,
            )
            result.passes.append(record)
            result.stop_reason = broken
            if on_pass:
                on_pass(record)
            break
        if index == 0 or similarity > best_similarity:
            best_similarity, best_draft = similarity, rewrite
        elif similarity < ROLLBACK_RATIO * best_similarity:
            result.rolled_back = True
            current = best_draft
            reason = (
                f"similarity to the original {similarity:.4f} < {ROLLBACK_RATIO} × best {best_similarity:.4f} "
                f"= {ROLLBACK_RATIO * best_similarity:.4f}: rolled back to the best pass"
            )
            record = _rolled_back(
                number=index + 1,
                reply=reply,
                similarity=similarity,
                best_similarity=best_similarity,
                guard=guard,
                reason=reason,
                scores={
                    "original": display_scores(draft, rewrite, guard),
                    "previous": display_scores(previous, rewrite, None),
                },
                latency_ms=(clock() - started) * 1000,
            )
            result.passes.append(record)
            result.stop_reason = reason
            if on_pass:
                on_pass(record)
            break
        convergence = checker.check(previous, rewrite) if checker is not None else None
        if convergence is None or convergence.error:
            converged = char_heuristic(previous, rewrite, config.epsilon)
            why = "no convergence checker" if convergence is None else f"the cascade refused ({convergence.error})"
            decided_by = "char_heuristic"
            reason = f"{why}: legacy char heuristic (ε {config.epsilon}) says {'converged' if converged else 'changed'}"
        else:
            converged, decided_by, reason = convergence.converged, convergence.decided_by, convergence.reason
        current = rewrite
        record = PassRecord(
            number=index + 1,
            reply=reply,
            similarity_to_original=similarity,
            best_similarity=best_similarity,
            guard=guard,
            convergence=convergence,
            converged=converged,
            decision=Decision.CONVERGED if converged else Decision.CONTINUE,
            decided_by=decided_by,
            reason=reason,
            degraded_from=(convergence.degraded_from if convergence else "") or (guard.degraded_from if guard else ""),
            scores={
                "original": display_scores(draft, rewrite, guard),
                "previous": display_scores(previous, rewrite, convergence),
            },
            latency_ms=(clock() - started) * 1000,
        )
        result.passes.append(record)
        if on_pass:
            on_pass(record)
        if converged:
            result.converged = True
            result.stop_reason = f"converged at pass {index + 1}: {reason}"
            break
    else:
        result.stop_reason = f"stopped after the maximum of {max_passes} pass(es) without converging"
    final = best_draft if result.rolled_back or current == "" else current
    result.output = final or draft
    _flag_low_quality(result)
    return result


def _broken(number: int, reply: RefinerReply, similarity: float, guard: Check | None, config: RefineConfig) -> str:
    """Why pass ``number`` must be rolled back whatever the best pass was, or ""."""
    target = "the best pass" if number > 1 else "the original"
    if not reply.protocol_ok:
        return f"pass {number} broke the critique/revise protocol (no <revised> block): rolled back to {target}"
    if guard is not None and not guard.error and config.similarity_floor and similarity < config.similarity_floor:
        return (
            f"pass {number}'s rewrite has similarity {similarity:.4f} to the original, below the floor "
            f"{config.similarity_floor:g}: rolled back to {target}"
        )
    return ""


def _flag_low_quality(result: LoopResult) -> None:
    """Unlike chatcli (which never sets it), flag ``refine_low_quality`` so the low-quality Reflexion
    trigger can fire when an agent forwards the flag."""
    reasons = []
    if result.passes and result.passes[0].reply.reports_issues:
        first = result.passes[0].reply.bullets
        reasons.append(f"the first critique reported {len(first)} material issue(s): {first[0]}")
    if result.rolled_back:
        reasons.append(f"quality regressed and the run rolled back ({result.stop_reason})")
    if reasons:
        result.low_quality = True
        result.low_quality_reason = "; ".join(reasons)


def _rolled_back(
    *,
    number: int,
    reply: RefinerReply,
    similarity: float,
    best_similarity: float,
    guard: Check | None,
    reason: str,
    scores: dict[str, Any],
    latency_ms: float,
) -> PassRecord:
    """A pass that was rolled back and ends the run (a broken protocol, or a regression against the best)."""
    return PassRecord(
        number=number,
        reply=reply,
        similarity_to_original=similarity,
        best_similarity=best_similarity,
        guard=guard,
        convergence=None,
        converged=False,
        decision=Decision.ROLLED_BACK,
        decided_by=guard.decided_by if guard else "",
        reason=reason,
        degraded_from=guard.degraded_from if guard else "",
        scores=scores,
        latency_ms=latency_ms,
    )
