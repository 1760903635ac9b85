"""``reflect_docs prepare|commit|attach WORKSPACE``: AIOSON's ``memory:reflect-prepare`` / ``-commit``.

Flags and exit codes are AIOSON's: any result with ``ok:false`` exits 1, ``ok:true`` exits 0; with
``--json`` the result object is printed as JSON.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lessonboard.models import SLUG_RE, Workspace
from lessons.reflect.api_views import GIT_RANGE
from lessons.reflect.commit import bad_input, commit_reflection, files_from_payload
from lessons.reflect.engine import MANIFEST_PATH
from lessons.reflect.prepare import prepare_reflection
from lessons.reflect.repository import RepositoryError, attach_repository, check_repository

NO_INPUT = "reflect_docs commit requires --output=<path> or JSON on stdin"


class Command(BaseCommand):
    help = "Workspace doc reflection (AIOSON's in-harness reflect): prepare a manifest, commit a rewrite."
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        prep = sub.add_parser("prepare", help="Evaluate the diff; write the manifest when relevant (or --force).")
        prep.add_argument("workspace")
        prep.add_argument("--agent", default="")
        prep.add_argument("--git-range", "--range", dest="git_range", default="")
        prep.add_argument("--force", action="store_true")
        prep.add_argument("--session-id", dest="session_id", default="")
        prep.add_argument("--json", action="store_true")
        com = sub.add_parser("commit", help="Validate and write {files: {relpath: content}} (--output or stdin).")
        com.add_argument("workspace")
        com.add_argument("--agent", default="")
        com.add_argument("--output", default="", help="JSON file, relative to the current directory.")
        com.add_argument("--dry-run", dest="dry_run", action="store_true")
        com.add_argument("--json", action="store_true")
        att = sub.add_parser("attach", help="Attach a git work tree (under LESSONBOARD_WORKSPACE_ROOTS).")
        att.add_argument("workspace")
        att.add_argument("--repo", required=True)
        att.add_argument("--bootstrap-dir", dest="bootstrap_dir", default=None)
        att.add_argument("--human-gate", dest="human_gate", choices=("on", "off"), default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            if action == "attach":
                self._attach(options)
                return
            workspace = Workspace.objects.filter(slug=options["workspace"]).first()
            if workspace is None:
                raise CommandError(f"unknown workspace {options['workspace']!r}")
            result = self._prepare(workspace, options) if action == "prepare" else self._commit(workspace, options)
        except RepositoryError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2, ensure_ascii=False))
        else:
            self._explain(result)
        if not result.get("ok"):
            raise SystemExit(1)

    def _attach(self, options: dict[str, Any]) -> None:
        gate = None if options["human_gate"] is None else options["human_gate"] == "on"
        if not re.match(SLUG_RE, options["workspace"]):
            raise CommandError(
                f"{options['workspace'][:40]!r} is not a workspace slug (lower-case letters, digits, '.', '_', '-')"
            )
        check_repository(options["repo"])  # before for_slug: a refused path creates no workspace
        workspace = Workspace.objects.for_slug(options["workspace"])
        attach_repository(workspace, repo_path=options["repo"], bootstrap_dir=options["bootstrap_dir"], human_gate=gate)
        self.stdout.write(
            f"{workspace.slug}: {workspace.repo_path} (bootstrap {workspace.reflect_bootstrap_dir}, "
            f"human gate {'on' if workspace.reflect_human_gate else 'off'})"
        )

    def _prepare(self, workspace: Workspace, options: dict[str, Any]) -> dict[str, Any]:
        git_range = options["git_range"]
        if git_range and not GIT_RANGE.match(git_range):
            raise CommandError(f"--git-range {git_range!r} is not a git revision range")
        return prepare_reflection(
            workspace=workspace,
            agent=options["agent"],
            git_range=git_range,
            force=options["force"],
            session_id=options["session_id"],
        )

    def _commit(self, workspace: Workspace, options: dict[str, Any]) -> dict[str, Any]:
        # Sources in AIOSON's order: --output (against the process's directory), then non-blank stdin.
        if options["output"]:
            try:
                raw = Path(options["output"]).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                return bad_input(str(exc))
        else:
            stdin = options.get("stdin") or sys.stdin
            raw = "" if stdin.isatty() else stdin.read()
            if not raw.strip():
                return bad_input(NO_INPUT)
        try:
            files = files_from_payload(json.loads(raw))
        except (ValueError, RecursionError) as exc:  # JSON errors (nested too deep too) and BadInput
            return bad_input(str(exc) or type(exc).__name__)
        return commit_reflection(workspace=workspace, files=files, agent=options["agent"], dry_run=options["dry_run"])

    def _explain(self, result: dict[str, Any]) -> None:
        out, err = self.stdout.write, self.stderr.write
        if result.get("reason") == "missing_bootstrap" or result.get("error") in (
            "missing_manifest",
            "bad_input",
            "path_escape",
            "write_failed",
        ):
            err(result["message"])
        elif result.get("error") == "validation_failed":
            err("validation failed:")
            for error in result["errors"]:
                err(f"  - {error}")
        elif result.get("skipped"):
            out("reflect skipped: no relevant signals in diff")
        elif "manifestPath" in result:
            out(f"reflect manifest at {MANIFEST_PATH}")
            out("targets: " + ", ".join(result["manifest"]["targets"]))
        elif result.get("dryRun"):
            out(f"dry-run validated {len(result['would_write'])} file(s)")
            for path in result["would_write"]:
                out(f"  would write {path}")
        elif result.get("pending"):
            out(f"proposal #{result['proposal_id']}: {result['message']}")
        else:
            out(f"wrote {len(result['written'])} bootstrap file(s)")
