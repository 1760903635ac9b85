"""The store port of the review pass for one workspace: ``memory`` and ``user`` go to the bounded memory
store (``lessons.review.memory``), ``lesson`` goes through ``lessons.store.persist_lesson`` and the lesson
history. Refusals come back as ``StoreOutcome(ok=False, message)``, never as exceptions."""

from __future__ import annotations

from typing import Any

from lessonboard.models import Workspace
from lessons.content import lesson_tags
from lessons.review import memory
from lessons.review.learning import StoreOutcome
from lessons.review.proposals import ReviewProposal
from lessons.store import persist_lesson


class WorkspaceStore:
    def __init__(
        self, workspace: Workspace, *, agent: str = "", actor: str = "system", user: Any = None, reason: str = ""
    ) -> None:
        self.workspace = workspace
        self.agent = agent
        self.actor = actor
        self.user = user
        self.reason = reason

    def apply(self, proposal: ReviewProposal) -> StoreOutcome:
        if proposal.target == "lesson":
            return self._apply_lesson(proposal)
        result = memory.apply_op(
            self.workspace,
            proposal.target,
            proposal.op,
            content=proposal.content or "",
            old_text=proposal.old_text or "",
            actor=self.actor,
            user=self.user,
            reason=self.reason or proposal.rationale,
        )
        details = result.as_dict()
        details.pop("message")
        return StoreOutcome(result.ok, result.message, details, ref=result.version)

    def _apply_lesson(self, proposal: ReviewProposal) -> StoreOutcome:
        fields = proposal.lesson
        assert fields is not None  # the schema guarantees it for lesson proposals
        result = persist_lesson(
            situation=fields.situation,
            mistake=fields.mistake,
            correction=fields.correction,
            tags=lesson_tags(fields.tags, fields.trigger),
            trigger=fields.trigger,
            workspace=self.workspace,
            agent=self.agent,
            confidence=proposal.score,
            provenance="review",
            actor=self.actor,
            user=self.user,
            reason=self.reason or proposal.rationale,
        )
        message = {"created": "Lesson added.", "reinforced": "Lesson already known (reinforced)."}.get(
            result.action, f"Lesson {result.action}."
        )
        details = {"target": "lesson", "lesson_id": result.lesson.pk, "action": result.action}
        return StoreOutcome(True, message, details, ref=result)
