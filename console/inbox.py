"""The inbox: everything waiting for a person, in one list, most urgent and newest first.

Five kinds of item: dead-job error groups (``dead``), pending memory/lesson proposals (``proposal``), doc
rewrites held by a workspace's human gate (``doc``), refine runs that rolled back or came out
low-quality (``refine``) and knowledge gaps — tasks no lesson applied to, grouped (``gap``). Every row has the same keys: ``a`` its accepting action (retry the group,
approve), ``r`` its refusing one (purge the group, reject with a reason), ``x`` dismiss it for me.

Dismissing is per person and is an audit event (``inbox.dismiss``), not a state of the item: the item
stays where it lives, and an error group comes back when a job dies in it after the dismissal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import Max, Q
from django.urls import reverse
from django.utils import timezone

from lessonboard.models import AuditEvent
from lessonq import bulk
from lessonq.triage import queries as triage
from lessons.reflect.gate import ProposalNotPending, approve_doc_proposal, reject_doc_proposal
from lessons.reflect.models import DocProposal
from lessons.review import decisions
from lessons.review.models import Proposal
from lessons.review.wording import decided_text
from lessons.usage import gaps
from refine.models import RefineRun

KINDS = ("dead", "proposal", "doc", "refine", "gap")
OPERATE, REVIEW = "lessonboard.operate_queue", "lessonboard.review_memory"
LIMIT = 50  # rows of each kind
DISMISS_MEMORY = timedelta(days=30)  # dismissals older than this are forgotten


@dataclass(frozen=True)
class Action:
    key: str  # the keyboard key: a, r or x
    name: str  # what the act view is asked to do
    label: str
    perm: str | None = None  # None: anyone who can see the inbox
    reason: bool = False  # asks for a reason first (rejecting)
    confirm: str = ""  # asks for confirmation first
    danger: bool = False


DISMISS = Action("x", "dismiss", "Dismiss")
ACTIONS: dict[str, list[Action]] = {
    "dead": [
        Action("a", "retry", "Retry group", OPERATE),
        Action(
            "r", "purge", "Purge group", OPERATE, confirm="Purge every dead job of this group for good?", danger=True
        ),
        DISMISS,
    ],
    "proposal": [
        Action("a", "approve", "Approve", REVIEW),
        Action("r", "reject", "Reject", REVIEW, reason=True),
        DISMISS,
    ],
    "doc": [Action("a", "approve", "Approve", REVIEW), Action("r", "reject", "Reject", REVIEW, reason=True), DISMISS],
    "refine": [DISMISS],
    "gap": [
        Action("r", "close", "No lesson needed", REVIEW, confirm="Close this knowledge gap for everyone?"),
        DISMISS,
    ],
}


@dataclass
class Item:
    kind: str
    key: str
    title: str
    detail: str
    when: datetime
    url: str
    urgency: int  # 3 urgent, 2 waits for a person, 1 worth a look
    count: int = 1
    actions: list[Action] = field(default_factory=list)

    @property
    def label(self) -> str:
        return {
            "dead": "Dead jobs",
            "proposal": "Proposal",
            "doc": "Doc rewrite",
            "refine": "Refine run",
            "gap": "Knowledge gap",
        }[self.kind]


def dismissed(user: Any) -> dict[tuple[str, str], datetime]:
    """(kind, key) → when this person last dismissed it."""
    since = timezone.now() - DISMISS_MEMORY
    rows = (
        AuditEvent.objects.filter(action="inbox.dismiss", actor_user=user, created_at__gte=since)
        .values_list("object_type", "object_ids")
        .annotate(at=Max("created_at"))
    )
    seen: dict[tuple[str, str], datetime] = {}
    for object_type, ids, at in rows:
        kind = object_type.removeprefix("inbox.")
        for key in ids or []:
            seen[(kind, str(key))] = max(at, seen.get((kind, str(key)), at))
    return seen


def _dead_groups() -> list[Item]:
    items = []
    for group in triage.error_groups(limit=LIMIT):
        last = group.last_seen or timezone.now()
        recent = group.windows.get("1h", 0)
        detail = (
            f"{group.total} dead" + (f", {recent} in the last hour" if recent else "") + f" · trigger {group.trigger}"
        )
        url = reverse("queue:index") + "?" + urlencode({"tab": "dead", "group": group.fingerprint})
        items.append(
            Item("dead", group.fingerprint, group.signature, detail, last, url, 3 if recent else 1, group.total)
        )
    return items


def _proposals() -> list[Item]:
    items = []
    for row in Proposal.objects.pending().select_related("workspace")[:LIMIT]:
        text = row.lesson.get("situation", "") if row.target == "lesson" else (row.content or row.old_text)
        detail = f"{row.target} {row.op} · score {row.score:.2f} · {row.workspace.slug}" + (
            f" · {row.agent}" if row.agent else ""
        )
        url = reverse("reviews:proposal", args=[row.pk])
        items.append(Item("proposal", str(row.pk), text, detail, row.created_at, url, 2))
    return items


def _doc_rewrites() -> list[Item]:
    items = []
    for doc in DocProposal.objects.pending().select_related("workspace").order_by("-created_at", "-id")[:LIMIT]:
        files = len(doc.files or [])
        title = f"Rewrite of {files} doc file{'s' if files != 1 else ''} in {doc.workspace.slug}"
        url = reverse("reflect:workspace", args=[doc.workspace.slug]) + f"#proposal-{doc.pk}"
        items.append(Item("doc", str(doc.pk), title, f"by {doc.agent or 'an agent'}", doc.created_at, url, 2))
    return items


def _refine_runs() -> list[Item]:
    items = []
    runs = RefineRun.objects.filter(Q(rolled_back=True) | Q(low_quality=True)).order_by("-created_at", "-id")
    for run in runs[:LIMIT]:
        title = f"Refine run #{run.pk} " + ("rolled back" if run.rolled_back else "came out low-quality")
        detail = " · ".join(part for part in (run.low_quality_reason[:160], run.task[:120], run.agent) if part)
        url = reverse("refine:run", args=[run.pk])
        items.append(Item("refine", str(run.pk), title, detail, run.finished_at or run.created_at, url, 1))
    return items


def _knowledge_gaps() -> list[Item]:
    items = []
    for group in gaps.open_gap_groups()[:LIMIT]:
        agents = ", ".join(sorted(group.agents)) or "an agent"
        detail = f"asked {group.count}× by {agents} · no lesson applied"
        url = group.write_url  # the "Write a lesson" form, prefilled with the task
        # Keyed by the group's newest retrieval: a new phrasing that joins the group changes the key.
        items.append(
            Item(
                "gap",
                str(group.ids[0]),
                group.task,
                detail,
                group.newest,
                url,
                2 if group.count >= 3 else 1,
                group.count,
            )
        )
    return items


def valid_key(kind: str, key: str) -> bool:
    """An error group is a 16-hex fingerprint; the other kinds are row ids."""
    if kind == "dead":
        return re.fullmatch(r"[0-9a-f]{16}", key) is not None
    return key.isascii() and key.isdigit() and len(key) < 19  # "²".isdigit() too


def items_for(user: Any) -> list[Item]:
    """What waits for ``user``: most urgent first, then newest; dismissed items left out."""
    gone = dismissed(user)
    rows = shared_items()
    visible = [i for i in rows if (i.kind, i.key) not in gone or i.when > gone[(i.kind, i.key)]]
    for item in visible:
        item.actions = [a for a in ACTIONS[item.kind] if a.perm is None or user.has_perm(a.perm)]
    visible.sort(key=lambda i: (i.urgency, i.when), reverse=True)
    return visible


SNAPSHOT = "lessonboard.inbox"


def shared_items() -> list[Item]:
    """Every waiting item, before any person's dismissals."""
    return [*_dead_groups(), *_proposals(), *_doc_rewrites(), *_refine_runs(), *_knowledge_gaps()]


def refresh() -> int:
    """Store what waits (kind, key, when of each item) in the maintained row the nav badge reads; run by
    beat (``LESSONBOARD_DERIVED_REFRESH_INTERVAL``) and after an inbox action. The number of items."""
    from lessonboard.models import DerivedState

    items = shared_items()
    DerivedState.write(SNAPSHOT, {"items": [[i.kind, i.key, i.when.isoformat()] for i in items]})
    return len(items)


def count_for(user: Any) -> int:
    """The nav badge, from the maintained row (one read by key) less this person's dismissals (one
    indexed read); never recomputed here. 0 before the first refresh."""
    from lessonboard.models import DerivedState

    data = DerivedState.read(SNAPSHOT)
    if not data:
        return 0
    gone = dismissed(user)
    count = 0
    for kind, key, when in data.get("items", []):
        at = gone.get((kind, key))
        if at is None or datetime.fromisoformat(when) > at:
            count += 1
    return count


def forget_count(user: Any) -> None:
    """After an action in the inbox: its inputs changed, so the maintained row is refreshed now."""
    refresh()


class InboxError(Exception):
    """An action that could not be done; the message is for the person who tried."""


def act(kind: str, key: str, name: str, user: Any, *, reason: str = "") -> str:
    """Do one row's action; the sentence to show in the row. Permission is the caller's (the view's)
    check; raises ``InboxError`` when the item no longer allows it."""
    if name == "dismiss":
        AuditEvent.record("inbox.dismiss", user=user, object_type=f"inbox.{kind}", object_ids=[key])
        return "Dismissed."
    if kind == "dead":
        return _act_on_group(key, name, user)
    if kind == "proposal":
        return _act_on_proposal(int(key), name, user, reason)
    if kind == "doc":
        return _act_on_doc(int(key), name, user, reason)
    if kind == "gap" and name == "close":
        return _close_gap(int(key), user)
    raise InboxError(f"Nothing to {name} on a {kind} item.")


def _act_on_group(fingerprint: str, name: str, user: Any) -> str:
    flt = triage.JobFilter(tab="dead", group=fingerprint)
    preview = triage.preview(name, flt.apply(), scope="filter", sort=flt.sort)
    if not preview.run_ids:
        raise InboxError("No dead job is left in this group: someone already retried or purged it.")
    action = bulk.start(name, preview.run_ids, scope="filter", filter=flt.as_dict(), matched=preview.matched, user=user)
    triage.forget_counts()
    verb = "Retrying" if name == "retry" else "Purging"
    return f"{verb} {len(preview.run_ids)} job{'s' if len(preview.run_ids) != 1 else ''} (bulk #{action.pk})."


def _act_on_proposal(pk: int, name: str, user: Any, reason: str) -> str:
    try:
        row = decisions.approve(pk, user) if name == "approve" else decisions.reject(pk, user, reason=reason)
    except decisions.DecisionError as exc:
        raise InboxError(exc.message) from exc
    return decided_text(row)


def _act_on_doc(pk: int, name: str, user: Any, reason: str) -> str:
    doc = DocProposal.objects.filter(pk=pk).first()
    if doc is None:
        raise InboxError(f"Doc rewrite #{pk} does not exist.")
    try:
        if name == "approve":
            decision = approve_doc_proposal(doc, user=user)
            if not decision.ok:
                raise InboxError(f"Doc rewrite #{pk} could not be approved ({decision.status}): {decision.message}")
            return f"Approved doc rewrite #{pk}: {decision.message}."
        if not reason.strip():
            raise InboxError("A rejection needs a reason.")
        return str(reject_doc_proposal(doc, user=user, reason=reason).message)
    except ProposalNotPending as exc:
        raise InboxError(str(exc)) from exc


def _close_gap(retrieval_id: int, user: Any) -> str:
    group = next((g for g in gaps.open_gap_groups() if retrieval_id in g.ids), None)
    if group is None:
        raise InboxError("This gap is already closed, or a lesson now covers it.")
    closed = gaps.dismiss(group.ids)
    AuditEvent.record(
        "lesson.gap.dismiss", user=user, object_type="retrieval", object_ids=group.ids, result={"closed": closed}
    )
    return f"Closed: {closed} task{'s' if closed != 1 else ''}, no lesson needed."
