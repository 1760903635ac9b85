"""Overview counts for gated memory writes. ``lessons.review`` is not an app of its own, so the lessons
app's ``AppConfig.ready()`` registers these with one line: ``lessons.review.overview.register()``."""

from __future__ import annotations

from lessonboard import overview


def counts() -> list[overview.Count]:
    from lessons.review.models import Proposal, ProposalStatus

    return [
        overview.Count(
            "Reviews", "Proposals waiting for a person", lambda: Proposal.objects.pending().count(), "reviews:queue"
        ),
        overview.Count(
            "Reviews",
            "Proposals that failed in the store",
            lambda: Proposal.objects.filter(status=ProposalStatus.FAILED).count(),
            "reviews:decisions",
            "status=failed",
        ),
    ]


def register() -> None:
    overview.add(counts())
