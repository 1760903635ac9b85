"""The shape of one review proposal, checked as untrusted model output (hermes' ``reviewProposalSchema``).

Only the *shape* is checked here. Whether a write can happen (empty content, no match, over budget) is
the store's call, so such a proposal still reaches the gate and, if approved, lands in ``failed`` with the
store's message (docs/compat/hermes.md#outcome-buckets).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

Target = Literal["memory", "user", "lesson"]
Op = Literal["add", "replace", "remove"]


class LessonFields(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    situation: str = Field(min_length=1, max_length=2000)
    mistake: str = Field(default="", max_length=2000)
    correction: str = Field(min_length=1, max_length=2000)
    trigger: str = Field(default="review", max_length=50)
    tags: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=20)


class ReviewProposal(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    target: Target
    op: Op = Field(validation_alias=AliasChoices("op", "action"))
    content: str | None = Field(default=None, max_length=10_000)
    old_text: str | None = Field(default=None, max_length=2_000, validation_alias=AliasChoices("old_text", "oldText"))
    lesson: LessonFields | None = None
    rationale: str = Field(default="", max_length=4_000)
    score: float = Field(ge=0.0, le=1.0, strict=True)
    # Set by the server (lessons.review.scoring.rescored) for a proposal an agent wrote itself: its own
    # score, advisory, and why the server's ``score`` is what it is. Never read from the proposer's input.
    agent_score: float | None = Field(default=None, exclude=True)
    score_reason: str = Field(default="", exclude=True)

    @model_validator(mode="after")
    def _fields_for_op(self) -> ReviewProposal:
        if self.target == "lesson":
            if self.op != "add":
                raise ValueError("lesson proposals can only 'add' (lessons change through their own history)")
            if self.lesson is None:
                raise ValueError("a lesson proposal needs 'lesson' with situation and correction")
            return self
        if self.op in ("add", "replace") and self.content is None:
            raise ValueError(f"'{self.op}' needs 'content'")
        if self.op in ("replace", "remove") and self.old_text is None:
            raise ValueError(f"'{self.op}' needs 'old_text'")
        return self

    def label(self) -> str:
        return f"{self.target}.{self.op}"

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class InvalidProposal(Exception):
    pass


def parse_proposal(raw: Any) -> ReviewProposal:
    """``raw`` as a ``ReviewProposal``, or ``InvalidProposal('Invalid review proposal: …')``."""
    if isinstance(raw, ReviewProposal):
        return raw
    if isinstance(raw, dict):  # set by the server only, never by whoever wrote the proposal
        raw = {k: v for k, v in raw.items() if k not in ("agent_score", "score_reason")}
    try:
        return ReviewProposal.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'proposal'}: {err['msg']}" for err in exc.errors()
        )
        raise InvalidProposal(f"Invalid review proposal: {problems}") from exc
