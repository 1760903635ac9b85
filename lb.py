#!/usr/bin/env python3
"""lessonboard's two front-door commands, with nothing but Python 3.11+ and git.

    python3 lb.py serve     # run lessonboard (embedded PostgreSQL + workers + web)
    python3 lb.py test      # run the whole test suite

Each creates or updates ``.venv`` from pinned files and then hands over to the project's own entry
points: ``serve`` (and ``manage``, ``setup``, ``mcp-stdio``) installs only ``requirements.txt``, what
lessonboard runs; ``test`` adds ``requirements-dev.txt`` (test and lint tools, the optional embedders).
A stamp in the venv holds the sha256 of what was installed, so a warm start costs a few hashes.

``test`` with no test path runs the whole suite on every core (pytest-xdist, ``-n``); with a path or
``-n`` of your own it runs as you say. ``test --quick`` runs the tier that starts no child process and no
browser (docs/testing.md#tiers).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
REQUIREMENTS = ROOT / "requirements.txt"
# What the test command installs: requirements-dev.txt and the files it includes with -r.
DEV_REQUIREMENTS = ROOT / "requirements-dev.txt"
STAMP = VENV / ".lessonboard-requirements.sha256"
# The quick tier: no child process (worker, gunicorn, serve, subprocess) and no browser.
QUICK = "not process and not e2e and not slow"


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _files(top: Path) -> list[Path]:
    """``top`` and every requirements file it includes with ``-r``, in order."""
    found = [top]
    for line in top.read_text().splitlines():
        if line.startswith("-r "):
            found.extend(f for f in _files(top.parent / line[3:].strip()) if f not in found)
    return found


def _digest(top: Path) -> str:
    return hashlib.sha256(b"".join(f.read_bytes() for f in _files(top))).hexdigest()


def ensure_venv(*, dev: bool = False) -> Path:
    """The venv's python, with requirements.txt installed (and requirements-dev.txt with ``dev``)."""
    if sys.version_info < (3, 11):  # noqa: UP036 - lb.py must run on any python3 to say this
        sys.exit(f"lessonboard needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    top = DEV_REQUIREMENTS if dev else REQUIREMENTS
    runtime, wanted = _digest(REQUIREMENTS), _digest(top)
    python = venv_python()
    installed = STAMP.read_text().split() if python.exists() and STAMP.exists() else []
    # The stamp's first word is requirements.txt's digest, the second (if any) the dev set's.
    if installed[:1] == [runtime] and (not dev or installed[1:2] == [wanted]):
        return python
    if not python.exists():
        print(f"lb: creating virtualenv in {VENV}", file=sys.stderr, flush=True)
        venv.EnvBuilder(with_pip=True, clear=False).create(VENV)
    print(f"lb: installing pinned dependencies from {top.name}", file=sys.stderr, flush=True)
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    # stdout stays clean: `mcp-stdio` speaks MCP on it.
    subprocess.run([*pip, "install", "--quiet", "-r", str(top)], check=True, stdout=sys.stderr)
    STAMP.write_text(f"{runtime} {wanted}\n" if dev else f"{runtime}\n")
    return python


def pytest_args(rest: list[str]) -> list[str]:
    """``test``'s words for pytest: ``--quick`` becomes the marker expression; the whole suite (no test
    path, no ``-n`` of the caller's) runs on every core."""
    args = list(rest)
    if "--quick" in args:
        args.remove("--quick")
        args = ["-m", QUICK, *args]
    paths = [a for a in args if not a.startswith("-") and (ROOT / a.split("::")[0]).exists()]
    chosen = any(a == "-n" or a.startswith(("-n", "--numprocesses", "--dist")) for a in args)
    if not paths and not chosen:
        args = ["-n", str(max(2, os.cpu_count() or 2)), "--dist", "loadgroup", *args]
    return args


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"serve", "test", "manage", "setup", "mcp-stdio"}:
        print(__doc__)
        print(
            "Also: `python3 lb.py manage <command> …` runs manage.py inside the venv;"
            " `python3 lb.py setup` only builds the venv (`setup --dev` with the test tools);"
            " `python3 lb.py mcp-stdio --url URL --token TOKEN` bridges an MCP client on stdio to /mcp."
        )
        return 2
    verb, rest = argv[0], argv[1:]
    python = ensure_venv(dev=verb == "test" or (verb == "setup" and "--dev" in rest))
    os.chdir(ROOT)
    if verb == "setup":
        return 0
    if verb == "serve":
        cmd = [str(python), "manage.py", "serve", *rest]
    elif verb == "mcp-stdio":
        cmd = [str(python), "-m", "console.mcp.stdio", *rest]
    elif verb == "manage":
        cmd = [str(python), "manage.py", *rest]
    else:
        cmd = [str(python), "-m", "pytest", *pytest_args(rest)]
    # Bytecode is cached in __pycache__ (git-ignored) even where the environment says not to write it
    # (PYTHONDONTWRITEBYTECODE=1): otherwise every process — each test worker, every gunicorn and Celery
    # child a test starts, every `serve` child — compiles the project's modules (and pytest rewrites every
    # test module) from source again, seconds of CPU each time.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    # exec: signals (Ctrl-C, SIGTERM) go straight to the real process, and no wrapper lingers.
    os.execv(cmd[0], cmd)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
