"""hermes' bounded memory store, per workspace: ``memory`` (the agent's notes) and ``user`` (the user
profile), each a list of entries joined by ``"\\n§\\n"`` with a character budget that counts the delimiters.

The rules follow NousResearch/hermes-agent ``tools/memory_tool.py`` (docs/compat/hermes.md#memory-store): entries are trimmed;
an exact duplicate add succeeds without writing; replace/remove find their entry by a unique substring
(several identical matches → the first); a write that would go over budget is refused and nothing is ever
truncated on the write path. The messages are hermes' own strings, because agents are prompted with them.

``plan`` is pure (the approval queue uses it to preview a write); ``apply_op`` runs it against the
locked row and records a ``MemoryVersion``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lessonboard.models import Workspace
from lessons.review.models import MemoryDocument, MemoryVersion

ENTRY_DELIMITER = "\n§\n"
TARGETS = ("memory", "user")
SEPARATOR = "═" * 46

# A small strict-scope threat scan in the spirit of hermes' threat_patterns (its pattern list is not
# reproduced): instructions aimed at the model, exfiltration of secrets, and invisible/bidi characters.
THREATS: list[tuple[str, re.Pattern[str]]] = [
    (
        "prompt_injection",
        re.compile(
            r"\b(ignore|disregard|forget)\s+(all\s+|any\s+)?(the\s+)?(previous|prior|above|earlier)\s+instructions\b",
            re.I,
        ),
    ),
    ("role_override", re.compile(r"\byou\s+are\s+now\s+(a|an|in)\b|\bsystem\s+prompt\s*:", re.I)),
    ("secret_exfiltration", re.compile(r"\b(curl|wget|fetch)\b[^\n]*\$\{?[A-Z_]*(KEY|TOKEN|SECRET|PASSWORD)", re.I)),
    ("invisible_unicode", re.compile("[\u200b\u200c\u200d\u2060\ufeff\u202a-\u202e\u2066-\u2069]")),
]


def limit_for(target: str) -> int:
    return int(settings.USER_CHAR_LIMIT if target == "user" else settings.MEMORY_CHAR_LIMIT)


def char_count(entries: list[str]) -> int:
    return len(ENTRY_DELIMITER.join(entries)) if entries else 0


def usage_text(entries: list[str], limit: int) -> str:
    current = char_count(entries)
    pct = min(100, int(current / limit * 100)) if limit > 0 else 0
    return f"{pct}% — {current:,}/{limit:,} chars"


def parse_entries(raw: str) -> list[str]:
    """Split a MEMORY.md-style text into entries: trimmed, empties and exact duplicates dropped."""
    entries = [piece.strip() for piece in raw.split(ENTRY_DELIMITER)]
    return list(dict.fromkeys(e for e in entries if e))


def scan(content: str) -> str | None:
    """The refusal message if ``content`` looks like an injection or exfiltration attempt."""
    for name, pattern in THREATS:
        if pattern.search(content):
            return (
                f"Blocked: content matches threat pattern '{name}' (possible prompt injection or "
                "exfiltration); it would enter every future system prompt. Rewrite the entry without it."
            )
    return None


@dataclass(frozen=True)
class Plan:
    """What a write would do: ``ok`` with the entries after it, or the store's refusal message."""

    ok: bool
    message: str
    before: list[str]
    after: list[str]
    changed: bool = False
    index: int | None = None  # the entry replace/remove resolves to
    matches: list[str] = field(default_factory=list)


def plan(entries: list[str], op: str, *, content: str = "", old_text: str = "", limit: int) -> Plan:
    before = list(entries)

    def refuse(message: str, matches: list[str] | None = None) -> Plan:
        return Plan(False, message, before, before, matches=matches or [])

    content = (content or "").strip()
    old_text = (old_text or "").strip()
    if op == "add":
        if not content:
            return refuse("Content cannot be empty.")
        threat = scan(content)
        if threat:
            return refuse(threat)
        if content in before:
            return Plan(True, "Entry already exists (no duplicate added).", before, before)
        after = [*before, content]
        if char_count(after) > limit:
            current = char_count(before)
            return refuse(
                f"Memory at {current:,}/{limit:,} chars. Adding this entry ({len(content)} chars) would exceed "
                "the limit. Consolidate now: use 'replace' to merge overlapping entries into shorter ones or "
                "'remove' stale or less important entries (see current_entries below), then retry this add — "
                "all in this turn."
            )
        return Plan(True, "Entry added.", before, after, changed=True, index=len(before))
    if op not in ("replace", "remove"):
        return refuse(f"Unknown action '{op}'. Use: add, replace, remove")
    if not old_text:
        return refuse("old_text cannot be empty.")
    if op == "replace":
        if not content:
            return refuse("new_content cannot be empty. Use 'remove' to delete entries.")
        threat = scan(content)
        if threat:
            return refuse(threat)
    matches = [(i, e) for i, e in enumerate(before) if old_text in e]
    if not matches:
        return refuse(
            f"No entry matched '{old_text}'. Check current_entries below and retry with the exact text of the "
            f"entry you want to {op}."
        )
    if len({e for _, e in matches}) > 1:
        return refuse(f"Multiple entries matched '{old_text}'. Be more specific.", [e for _, e in matches])
    index = matches[0][0]
    after = list(before)
    if op == "remove":
        after.pop(index)
        return Plan(True, "Entry removed.", before, after, changed=True, index=index)
    after[index] = content
    new_total = char_count(after)
    if new_total > limit:
        return refuse(
            f"Replacement would put memory at {new_total:,}/{limit:,} chars. Shorten the new content, or "
            "'remove' other stale or less important entries to make room (see current_entries below), then "
            "retry — all in this turn."
        )
    return Plan(True, "Entry replaced.", before, after, changed=after != before, index=index)


def entries_of(workspace: Workspace, target: str) -> list[str]:
    doc = MemoryDocument.objects.filter(workspace=workspace, target=target).first()
    return list(doc.entries) if doc else []


@dataclass(frozen=True)
class MemoryResult:
    """hermes' ``MemoryOpOutcome``: success or the refusal, with the target's usage after the call."""

    ok: bool
    message: str
    target: str
    entry_count: int
    used_chars: int
    char_limit: int
    version: MemoryVersion | None = None
    current_entries: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "success": self.ok,
            "message": self.message,
            "target": self.target,
            "entry_count": self.entry_count,
            "used_chars": self.used_chars,
            "char_limit": self.char_limit,
            "usage": f"{self.used_chars:,}/{self.char_limit:,}",
        }
        if not self.ok:
            data["current_entries"] = self.current_entries
        return data


def _locked_document(workspace: Workspace, target: str) -> MemoryDocument:
    MemoryDocument.objects.get_or_create(workspace=workspace, target=target)
    return MemoryDocument.objects.select_for_update().get(workspace=workspace, target=target)


def record_version(
    doc: MemoryDocument, action: str, entries: list[str], *, message: str, actor: str, user: Any, reason: str
) -> MemoryVersion:
    doc.entries = entries
    doc.version += 1
    doc.updated_at = timezone.now()
    doc.save(update_fields=["entries", "version", "updated_at"])
    return MemoryVersion.objects.create(
        document=doc,
        number=doc.version,
        action=action,
        entries=entries,
        message=message,
        actor=actor,
        actor_user=user if user is not None and getattr(user, "is_authenticated", False) else None,
        reason=reason,
    )


@transaction.atomic
def apply_op(
    workspace: Workspace,
    target: str,
    op: str,
    *,
    content: str = "",
    old_text: str = "",
    actor: str = "system",
    user: Any = None,
    reason: str = "",
) -> MemoryResult:
    """Run one write against the live entries (row-locked), versioning it when it changes anything."""
    if target not in TARGETS:
        raise ValueError(f"Invalid target '{target}'. Use 'memory' or 'user'.")
    limit = limit_for(target)
    doc = _locked_document(workspace, target)
    result = plan(list(doc.entries), op, content=content, old_text=old_text, limit=limit)
    version = None
    if result.ok and result.changed:
        version = record_version(doc, op, result.after, message=result.message, actor=actor, user=user, reason=reason)
    return MemoryResult(
        result.ok,
        result.message,
        target,
        len(result.after),
        char_count(result.after),
        limit,
        version,
        current_entries=[] if result.ok else list(doc.entries),
    )


def render_block(target: str, entries: list[str], limit: int | None = None) -> str:
    """hermes' system-prompt block: a header with the usage line, the entries joined by the delimiter.

    Empty when there are no entries. An over-budget list (only reachable through a lowered budget) is
    cut to head 70% / tail 20% of ``max(2×limit, 4000)`` and flagged, never truncated on disk."""
    if not entries:
        return ""
    limit = limit or limit_for(target)
    content = ENTRY_DELIMITER.join(entries)
    current = len(content)
    pct = min(100, int(current / limit * 100)) if limit > 0 else 0
    cap = max(limit * 2, 4000)
    if current > cap:
        head, tail = int(cap * 0.7), int(cap * 0.2)
        omitted = current - head - tail
        content = (
            content[:head] + f"\n\n[... {omitted:,} chars truncated — memory over budget ({current:,}/{limit:,}); "
            "consolidate via memory(action=remove/replace) ...]\n\n" + content[-tail:]
        )
    over = " ⚠ OVER BUDGET" if current > limit else ""
    if target == "user":
        header = f"USER PROFILE (who the user is) [{pct}% — {current:,}/{limit:,} chars{over}]"
    else:
        header = f"MEMORY (your personal notes) [{pct}% — {current:,}/{limit:,} chars{over}]"
    return f"{SEPARATOR}\n{header}\n{SEPARATOR}\n{content}"
