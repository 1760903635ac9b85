#!/usr/bin/env python3
"""lessonboard's two front-door commands, with nothing but Python 3.11+ and git.

    python3 lb.py serve     # run lessonboard (embedded PostgreSQL + workers + web)
    python3 lb.py test      # run the whole test suite

Each creates or updates ``.venv`` from ``requirements.txt`` (every package pinned) and then hands over
to the project's own entry points. The venv is rebuilt only when ``requirements.txt`` changes: a stamp
holding the file's sha256 lives in the venv, so a warm start costs one hash.
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
STAMP = VENV / ".lessonboard-requirements.sha256"


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv() -> Path:
    if sys.version_info < (3, 11):  # noqa: UP036 - lb.py must run on any python3 to say this
        sys.exit(f"lessonboard needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    python = venv_python()
    if python.exists() and STAMP.exists() and STAMP.read_text().strip() == wanted:
        return python
    if not python.exists():
        print(f"lb: creating virtualenv in {VENV}", file=sys.stderr, flush=True)
        venv.EnvBuilder(with_pip=True, clear=False).create(VENV)
    print("lb: installing pinned dependencies from requirements.txt", file=sys.stderr, flush=True)
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    # stdout stays clean: `mcp-stdio` speaks MCP on it.
    subprocess.run([*pip, "install", "--quiet", "-r", str(REQUIREMENTS)], check=True, stdout=sys.stderr)
    STAMP.write_text(wanted + "\n")
    return python


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"serve", "test", "manage", "setup", "mcp-stdio"}:
        print(__doc__)
        print(
            "Also: `python3 lb.py manage <command> …` runs manage.py inside the venv;"
            " `python3 lb.py setup` only builds the venv;"
            " `python3 lb.py mcp-stdio --url URL --token TOKEN` bridges an MCP client on stdio to /mcp."
        )
        return 2
    python = ensure_venv()
    verb, rest = argv[0], argv[1:]
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
        cmd = [str(python), "-m", "pytest", *rest]
    # exec: signals (Ctrl-C, SIGTERM) go straight to the real process, and no wrapper lingers.
    os.execv(cmd[0], cmd)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
