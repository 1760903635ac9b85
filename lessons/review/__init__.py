"""Gated memory writes: hermes' reviewAndLearn pass, its gates, the memory targets and the approval queue."""

from lessons.review.learning import LearnOutcome, ReviewPassError, Verdict, review_and_learn

__all__ = ["LearnOutcome", "ReviewPassError", "Verdict", "review_and_learn"]
