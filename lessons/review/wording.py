"""How the store's messages and a decision's outcome read for a person on a page (the store's own wording
is written for the agent that proposed the write)."""

from __future__ import annotations

from lessons.review.models import Decision, MemoryTargetName, Proposal, ProposalStatus

TARGET_LABELS = {**dict(MemoryTargetName.choices), "lesson": "Lesson store"}


# The store's refusals are written for the agent that proposed the write (hermes' tool text names
# fields of its JSON reply); a person reading them on a page gets the same facts in page terms.
_FOR_PEOPLE = (
    (
        "Check current_entries below and retry with the exact text of the entry you want to",
        "Edit old_text to quote an entry exactly, or reject; the store cannot",
    ),
    (
        "(see current_entries below), then retry this add — all in this turn.",
        "first.",
    ),
    ("(see current_entries below), then retry — all in this turn.", "first."),
    (
        "Consolidate now: use 'replace' to merge overlapping entries into shorter ones or 'remove' stale or less important entries",
        "Approve a shorter version (e), or remove or merge stored entries",
    ),
    (
        "Shorten the new content, or 'remove' other stale or less important entries to make room",
        "Edit the content shorter (e), or remove other entries",
    ),
)


def for_people(message: str) -> str:
    """The store's message as a reviewer should read it."""
    for agent_text, page_text in _FOR_PEOPLE:
        message = message.replace(agent_text, page_text)
    return message


def decided_text(row: Proposal) -> str:
    """What a decision did, in words: "Approved #8: written to Agent notes (MEMORY.md)."."""
    where = TARGET_LABELS.get(row.target, row.target)
    verb = "Edited and approved" if row.decision == Decision.EDITED else "Approved"
    if row.status == ProposalStatus.REJECTED:
        return f"Rejected #{row.pk}" + (f": {row.reason}" if row.reason else ".")
    if row.status == ProposalStatus.FAILED:
        return f"{verb} #{row.pk}, but the store refused it: {for_people(row.message)}"
    if row.target == "lesson":
        return f"{verb} #{row.pk}: written to the lesson store" + (
            f" ({row.lesson_action})." if row.lesson_action else "."
        )
    if row.message.startswith("Entry already exists"):
        return f"{verb} #{row.pk}: {where} already had this entry, nothing changed."
    return f"{verb} #{row.pk}: written to {where}."
