"""Files and folders private to their owner: files 0600, folders 0700, whatever the umask.

What an agent or a service keeps on disk describes its data or holds its secrets (job states,
joined rosters, pinned peer keys, trained models and per-row labels, tokens, databases,
audit logs), so it is created readable and writable by its owner only. ``mkdir`` and ``open``
apply the umask to the mode they are given, so the mode is also set explicitly. Whole files
are written atomically (a temporary file beside the target, then a rename): a reader, or a
process restarted after a crash, sees the old content or the new, never a part. A folder
that already exists keeps its mode (it may be the operator's choice, such as a shared
parent); a file written here replaces the old one and so gets mode 0600.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "FILE_MODE", "FOLDER_MODE", "create_private", "private_file", "private_folder",
    "write_private",
]

#: The mode of every file written here, and of every folder created here.
FILE_MODE = 0o600
FOLDER_MODE = 0o700


def private_folder(path: Path) -> Path:
    """Create ``path`` and its missing parents, each new folder with mode 0700; returns it."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=FOLDER_MODE)
        except FileExistsError:
            continue  # made meanwhile by another thread or process, which sets its mode
        os.chmod(folder, FOLDER_MODE)
    return path


def _open_private(path: Path, flags: int) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have removed owner bits; O_TRUNC keeps a mode
    except OSError:
        os.close(fd)
        raise
    return fd


def create_private(path: Path) -> bool:
    """Create ``path`` empty with mode 0600 (missing folders 0700) unless it exists; True when
    it was created. An existing file is left as it is."""
    private_folder(path.parent)
    try:
        fd = _open_private(path, os.O_EXCL)
    except FileExistsError:
        return False
    os.close(fd)
    return True


@contextmanager
def private_file(path: Path, *, exclusive: bool = False) -> Iterator[BinaryIO]:
    """A binary handle whose content becomes ``path`` (mode 0600, missing folders 0700) when
    the block ends without an error; after an error ``path`` is as it was.

    The content goes to a new temporary file of a unique name beside ``path`` (created
    exclusively: a link planted there is never followed, two writers never share one), is
    synced to disk and renamed over ``path``; then the folder is synced (where it can be).

    ``exclusive``: write ``path`` itself, only if it does not exist (else FileExistsError),
    for a file that must never be replaced, such as a newly generated key.
    """
    private_folder(path.parent)
    fd, target = (_open_private(path, os.O_EXCL), path) if exclusive else _temporary(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if not exclusive:
            os.replace(target, path)
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


def _temporary(path: Path) -> tuple[int, Path]:
    """A new empty file of a unique name beside ``path``, mode 0600, created exclusively."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp asks for 0600, which the umask may narrow
    except OSError:
        os.close(fd)
        os.unlink(name)
        raise
    return fd, Path(name)


def _sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable, where the platform allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the rename stands all the same
    finally:
        os.close(fd)


def write_private(path: Path, data: bytes | str) -> None:
    """Replace ``path`` by ``data`` (str as UTF-8) atomically, mode 0600 (folders 0700)."""
    with private_file(path) as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
