"""``manage.py reflect`` — chatcli's ``/reflect`` (docs/compat/chatcli.md#reflect-command) for this node's queue.

    reflect                 status: pending jobs and DLQ entries
    reflect list            pending jobs and the DLQ
    reflect failed          the DLQ in detail
    reflect retry <id>      move a DLQ entry back to the queue
    reflect purge <id>      delete a DLQ entry
    reflect drain           replay the WAL now
    reflect <free text>     persist a manual lesson (no LLM, no queue; audited as ``lesson.create``)

A text that looks like a mistyped subcommand (one word within edit distance 2 of one, or such a word
followed by a job id: ``reflect retyr <id>``, ``reflect faild``) is not saved: it asks "did you mean …?"
and exits non-zero; ``--lesson`` saves it anyway.

``--json`` prints one JSON object instead of chatcli's English lines. Failures exit non-zero.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from lessonq import dlq, reconcile
from lessonq.models import Job
from lessonq.paths import dlq as dlq_dir
from lessonq.paths import wal

SUBCOMMANDS = ("list", "failed", "retry", "purge", "drain")
# chatcli's message, with lessonboard's variable (chatcli's is CHATCLI_QUALITY_REFLEXION_QUEUE_ENABLED=1).
DISABLED = "reflexion queue is disabled — enable via LESSONQ_ENABLED=true"


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def go_duration(seconds: float) -> str:
    """Go's ``Duration.String`` for whole seconds: ``0s``, ``45s``, ``1m5s``, ``3h0m2s``."""
    s = max(int(seconds), 0)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"


class Command(BaseCommand):
    help = "chatcli's /reflect: queue status, list, failed, retry <id>, purge <id>, drain, or a free-text lesson."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("words", nargs="*", help="subcommand and arguments, or the text of a manual lesson")
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.add_argument(
            "--lesson",
            action="store_true",
            help="save the words as a manual lesson even if they look like a subcommand",
        )

    def execute(self, *args: Any, **options: Any) -> Any:
        """From a terminal, a failure prints chatcli's own line (``  ⚠  retry failed: …``) on stderr and
        exits non-zero, without Django's ``CommandError:`` prefix; ``call_command`` still raises."""
        try:
            return super().execute(*args, **options)
        except CommandError as exc:
            if not getattr(self, "_called_from_command_line", False) or options.get("traceback"):
                raise
            self.stderr.write("  " + str(exc))
            sys.exit(exc.returncode or 1)

    def handle(self, *args: Any, words: list[str], json: bool = False, lesson: bool = False, **options: Any) -> None:
        self.as_json = json
        tokens = " ".join(words).split()
        sub = tokens[0].lower() if tokens else ""
        if lesson:
            if not tokens:
                raise CommandError("usage: /reflect --lesson <text>")
            return self.manual(" ".join(words).strip())
        if sub in SUBCOMMANDS and not settings.LESSONQ_ENABLED:
            raise CommandError(DISABLED)
        if not tokens:
            if not settings.LESSONQ_ENABLED:
                return self.say(DISABLED)
            return self.status()
        if sub == "list":
            return self.list_jobs()
        if sub == "failed":
            return self.failed()
        if sub in ("retry", "purge"):
            if len(tokens) < 2:
                raise CommandError(f"usage: /reflect {sub} <job-id>")
            return self.retry(tokens[1]) if sub == "retry" else self.purge(tokens[1])
        if sub == "drain":
            return self.drain()
        meant = mistyped_subcommand(tokens)
        if meant is not None:
            raise CommandError(
                f"⚠  did you mean '/reflect {meant}'? Not saved as a lesson; "
                "to save these words as a manual lesson, add --lesson"
            )
        return self.manual(" ".join(words).strip())

    # --- output ---------------------------------------------------------------------------------------
    def say(self, message: str) -> None:
        self.stdout.write("  " + message)

    def emit(self, data: dict[str, Any]) -> None:
        self.stdout.write(_json(data))

    # --- subcommands ----------------------------------------------------------------------------------
    def status(self) -> None:
        pending, dead = wal().count(), dlq_dir().count()
        if self.as_json:
            return self.emit({"pending": pending, "dlq": dead})
        self.say(f"reflexion queue: {pending} pending")
        self.say(f"reflexion DLQ: {dead} entries")
        self.say("subcommands: /reflect list | failed | retry <id> | purge <id> | drain")

    def list_jobs(self) -> None:
        now = timezone.now()
        pending = list(Job.objects.for_this_node().active().order_by("next_attempt_at"))
        dead = list(dlq.dead_jobs().filter(node=_node()))
        if self.as_json:
            return self.emit({"pending": [_job(j) for j in pending], "dlq": [_job(j) for j in dead]})
        self.say(f"pending ({len(pending)}):")
        for j in pending:
            age = go_duration((now - j.enqueued_at).total_seconds())
            self.stdout.write(f"    {j.pk}  [trigger={j.trigger}  attempts={j.attempts}  age={age}]")
            self.stdout.write(f"      task: {cut(j.task, 100)}")
        self.say(f"dead letter queue ({len(dead)}):")
        for j in dead:
            self.stdout.write(f"    {j.pk}  [trigger={j.trigger}  attempts={j.attempts}]")
            if j.last_error:
                self.stdout.write(f"      last error: {cut(j.last_error, 160)}")

    def failed(self) -> None:
        dead = list(dlq.dead_jobs().filter(node=_node()))
        if self.as_json:
            return self.emit({"dlq": [_job(j) for j in dead]})
        if not dead:
            return self.say("DLQ is empty — no failed lessons to review")
        self.say(f"dead letter queue ({len(dead)}):")
        for j in dead:
            enqueued = timezone.localtime(j.enqueued_at).strftime("%Y-%m-%d %H:%M")
            self.stdout.write(f"    {j.pk}  [trigger={j.trigger}  attempts={j.attempts}  enqueued={enqueued}]")
            self.stdout.write(f"      task: {cut(j.task, 100)}")
            if j.last_error:
                self.stdout.write(f"      last error: {cut(j.last_error, 240)}")

    def retry(self, job_id: str) -> None:
        try:
            dlq.retry(job_id, actor="cli")
        except dlq.DLQError as exc:
            raise CommandError(f"⚠  retry failed: {exc}") from exc
        if self.as_json:
            return self.emit({"job_id": job_id, "status": "requeued"})
        self.say(f"job {job_id} re-queued")

    def purge(self, job_id: str) -> None:
        try:
            dlq.purge(job_id, actor="cli")
        except dlq.DLQError as exc:
            raise CommandError(f"⚠  purge failed: {exc}") from exc
        if self.as_json:
            return self.emit({"job_id": job_id, "status": "purged"})
        self.say(f"job {job_id} purged from DLQ")

    def drain(self) -> None:
        try:
            report = reconcile.replay()
        except Exception as exc:
            raise CommandError(f"⚠  drain failed: {exc}") from exc
        if self.as_json:
            return self.emit(report.as_dict())
        self.say(f"drain complete — {report.dispatched} job(s) re-enqueued from WAL")

    def manual(self, text: str) -> None:
        # The same path as the lessons page and POST /api/v1/lessons: chatcli's /reflect <text> shape.
        from lessonboard.inputs import unstorable_reason
        from lessons.store import persist_manual

        problem = unstorable_reason(text)
        if problem is not None:  # refused like the API and the page (docs/api.md#input-policy)
            raise CommandError(f"the lesson text {problem}")
        from django.db import transaction

        from lessonboard.models import AuditEvent

        with transaction.atomic():  # the lesson and its audit event commit together, like the API's
            result = persist_manual(text, actor="cli")
            AuditEvent.record(
                "lesson.create",
                object_type="lesson",
                object_ids=[result.lesson.pk],
                result={"action": result.action, "via": "cli"},
                reason="manual lesson (manage reflect)",
            )
        if self.as_json:
            return self.emit({"lesson_id": result.lesson.pk, "action": result.action})
        self.say("lesson persisted to long-term memory (category=lesson)")


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insert, delete, substitute: 1 each)."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[len(b)]


def mistyped_subcommand(tokens: list[str]) -> str | None:
    """``retry <id>`` for ``["retyr", "<id>"]``, ``failed`` for ``["faild"]``; ``None`` for a real text."""
    from lessonq.jobid import is_job_id

    if not tokens or len(tokens) > 2 or (len(tokens) == 2 and not is_job_id(tokens[1].lower())):
        return None
    word = tokens[0].lower()
    distance, verb = min((edit_distance(word, verb), verb) for verb in SUBCOMMANDS)
    if distance > 2:
        return None
    return f"{verb} {tokens[1]}" if len(tokens) == 2 else verb


def _node() -> str:
    from django.conf import settings

    return str(settings.LESSONQ_QUEUE)


def _job(j: Job) -> dict[str, Any]:
    def iso(v: datetime | None) -> str | None:
        return v.isoformat() if v else None

    return {
        "id": j.pk,
        "state": j.state,
        "trigger": j.trigger,
        "attempts": j.attempts,
        "task": j.task,
        "last_error": j.last_error,
        "waiting_reason": j.waiting_reason,
        "enqueued_at": iso(j.enqueued_at),
        "next_attempt_at": iso(j.next_attempt_at),
    }


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, sort_keys=True)
