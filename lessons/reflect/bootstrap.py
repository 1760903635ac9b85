"""The files doc reflection reads and writes inside a repository: the bootstrap docs and the manifest.

Writes are atomic and durable (temp file → fsync → rename → directory fsync), so an agent never reads
half a manifest and a crash never leaves half a doc.

The repository is not trusted (whoever can push to it controls its tree), so no read or write leaves it:
a path is resolved, must stay inside the repository, and is then opened one component at a time from
the repository's directory with ``O_NOFOLLOW``, so a symlink swapped in after the check fails the open
instead of redirecting it (docs/security.md#hostile-repositories). A symlink that stays inside the
repository is followed; one that leads out is refused with ``OutsideRepository``.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from django.conf import settings

from lessons.reflect.engine import BOOTSTRAP_FILES, MANIFEST_PATH
from lessons.reflect.repository import RepositoryError, is_within

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class OutsideRepository(RepositoryError):
    """A path of the repository resolves (through a symlink) outside it, or is not a regular file."""


def manifest_file(repo: Path) -> Path:
    return repo / MANIFEST_PATH


def _confine(repo: Path, rel: str | Path) -> tuple[Path, tuple[str, ...]]:
    """The repository's real path and the components of ``rel`` resolved inside it."""
    real_repo = Path(os.path.realpath(repo))
    target = Path(os.path.realpath(real_repo / rel))
    if not is_within(target, real_repo):
        raise OutsideRepository(f"refused: {rel} resolves outside the repository (a symlink?)")
    return real_repo, target.relative_to(real_repo).parts


def _open_dir(real_repo: Path, parts: tuple[str, ...], *, create: bool = False) -> int:
    """A descriptor of ``real_repo/parts``, each step opened without following a symlink."""
    fd = os.open(real_repo, _DIR_FLAGS)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, fd):
                    raise OutsideRepository(f"refused: {part} became a symlink while it was opened") from exc
                raise
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def read_bytes(repo: Path, rel: str | Path) -> bytes:
    """A regular file of the repository; ``OutsideRepository`` for one that leads out or is not a file,
    ``OSError`` when it is missing or unreadable."""
    real_repo, parts = _confine(repo, rel)
    if not parts:
        raise OutsideRepository(f"refused: {rel} is the repository itself")
    dir_fd = _open_dir(real_repo, parts[:-1])
    try:
        # O_NONBLOCK: a FIFO planted under the name must not hang the request on open.
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OutsideRepository(f"refused: {rel} is not a regular file")
        if info.st_nlink > 1:
            # A hard link may share its inode with a file anywhere on the file system.
            raise OutsideRepository(f"refused: {rel} is a hard link")
        # No doc an agent could rewrite is larger than a commit body may be; a bigger file is an attack
        # on the server's memory, not documentation.
        limit = settings.REFLECT_MAX_COMMIT_BYTES
        data = handle.read(limit + 1)
        if len(data) > limit:
            raise RepositoryError(f"refused: {rel} is larger than {limit} bytes")
        return data


def is_file(repo: Path, rel: str | Path) -> bool:
    try:
        read_bytes(repo, rel)
    except (OSError, RepositoryError):
        return False
    return True


def is_dir(repo: Path, rel: str | Path) -> bool:
    """Whether ``rel`` is a directory inside the repository; ``OutsideRepository`` when it leads out."""
    real_repo, parts = _confine(repo, rel)
    try:
        os.close(_open_dir(real_repo, parts))
    except RepositoryError:
        raise
    except OSError:
        return False
    return True


def read_text(repo: Path, rel: str | Path) -> str:
    """UTF-8 text as Node's ``readFile(p, 'utf8')`` gives it: no newline normalisation, a BOM kept."""
    return read_bytes(repo, rel).decode("utf-8", errors="replace")


def read_snapshot(repo: Path, bootstrap_dir: str) -> dict[str, str]:
    """The four bootstrap files; a missing or unreadable one is ``""``. ``RepositoryError`` when the
    folder or a file leads out of the repository (its content is never read) or is too large."""
    snapshot = {}
    for name in BOOTSTRAP_FILES:
        try:
            snapshot[name] = read_text(repo, f"{bootstrap_dir}/{name}")
        except RepositoryError:
            raise
        except OSError:
            snapshot[name] = ""
    return snapshot


def write_atomic(repo: Path, rel: str | Path, text: str) -> None:
    """Replace ``rel`` inside the repository (folders created as needed), never through a symlink that
    leads out. Keeps the mode the file had (or 0644) so the agent, often another user than the server,
    can still read its docs and the manifest."""
    real_repo, parts = _confine(repo, rel)
    if not parts:
        raise OutsideRepository(f"refused: {rel} is the repository itself")
    name = parts[-1]
    data = text.encode("utf-8", errors="surrogatepass")
    dir_fd = _open_dir(real_repo, parts[:-1], create=True)
    try:
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            # Renaming over a symlink replaces the link itself, never its target.
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_manifest(repo: Path, manifest: dict[str, Any]) -> Path:
    """``JSON.stringify(manifest, null, 2)`` at ``.aioson/runtime/reflect-prompt.json``, overwriting."""
    write_atomic(repo, MANIFEST_PATH, json.dumps(manifest, indent=2, ensure_ascii=False))
    return manifest_file(repo)


def load_manifest(repo: Path) -> tuple[bool, Any]:
    """``(True, parsed JSON)``, or ``(False, None)`` when the file is unreadable, not JSON, or leads out
    of the repository."""
    try:
        return True, json.loads(read_text(repo, MANIFEST_PATH))
    except (OSError, ValueError, RepositoryError):
        return False, None


def remove_manifest(repo: Path) -> None:
    try:
        # The folder is resolved, the name is not: a manifest that is a symlink loses the link only.
        real_repo, parts = _confine(repo, os.path.dirname(MANIFEST_PATH))
        dir_fd = _open_dir(real_repo, parts)
        try:
            os.unlink(os.path.basename(MANIFEST_PATH), dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    except (OSError, RepositoryError):
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
