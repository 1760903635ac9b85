"""The files doc reflection reads and writes inside a repository: the bootstrap docs and the manifest.

Writes are atomic and durable (temp file → fsync → rename → directory fsync), so an agent never reads
half a manifest and a crash never leaves half a doc.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lessonboard import files
from lessons.reflect.engine import BOOTSTRAP_FILES, MANIFEST_PATH
from lessons.reflect.repository import is_within


def manifest_file(repo: Path) -> Path:
    return repo / MANIFEST_PATH


def bootstrap_folder(repo: Path, bootstrap_dir: str) -> Path:
    return repo / bootstrap_dir


def read_text(path: Path) -> str:
    """UTF-8 text as Node's ``readFile(p, 'utf8')`` gives it: no newline normalisation, a BOM kept."""
    return path.read_bytes().decode("utf-8", errors="replace")


def read_snapshot(folder: Path) -> dict[str, str]:
    """The four bootstrap files; a missing or unreadable one is ``""``."""
    snapshot = {}
    for name in BOOTSTRAP_FILES:
        try:
            snapshot[name] = read_text(folder / name)
        except OSError:
            snapshot[name] = ""
    return snapshot


def write_atomic(path: Path, text: str) -> None:
    # Keep the mode the file had (or 0644) so the agent, often another user than the server, can still
    # read its docs and the manifest.
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        mode = 0o644
    files.write_atomic(path, text.encode("utf-8", errors="surrogatepass"), mode=mode)


def write_manifest(repo: Path, manifest: dict[str, Any]) -> Path:
    """``JSON.stringify(manifest, null, 2)`` at ``.aioson/runtime/reflect-prompt.json``, overwriting."""
    path = manifest_file(repo)
    runtime = Path(os.path.realpath(path.parent)) if path.parent.exists() else None
    if runtime is not None and not is_within(runtime, Path(os.path.realpath(repo))):
        raise OSError(f"refused write outside the repository: {MANIFEST_PATH}")
    write_atomic(path, json.dumps(manifest, indent=2, ensure_ascii=False))
    return path


def load_manifest(repo: Path) -> tuple[bool, Any]:
    """``(True, parsed JSON)``, or ``(False, None)`` when the file is unreadable or not JSON."""
    try:
        return True, json.loads(read_text(manifest_file(repo)))
    except (OSError, ValueError):
        return False, None


def remove_manifest(repo: Path) -> None:
    try:
        manifest_file(repo).unlink()
    except OSError:
        pass  # AIOSON ignores errors here too: the docs are written, that is the commit


def contained_target(repo: Path, bootstrap_dir: str, rel: str) -> tuple[bool, Path]:
    """Where ``rel`` resolves against the repository, and whether it lies under the bootstrap folder.

    AIOSON checks the lexically resolved path; the symlink-resolved path is checked as well so a link
    inside the folder cannot point a write elsewhere.
    """
    folder = Path(os.path.normpath(repo / bootstrap_dir))
    if "\0" in rel:  # no file system takes it; refuse rather than fail in os.path
        return False, folder / rel.replace("\0", "\\0")
    resolved = Path(os.path.normpath(os.path.join(repo, rel)))
    if not is_within(resolved, folder):
        return False, resolved
    real_repo = Path(os.path.realpath(repo))
    real_folder = Path(os.path.realpath(folder))
    real_target = Path(os.path.realpath(resolved))
    ok = is_within(real_folder, real_repo) and is_within(real_target, real_folder)
    return ok, resolved
