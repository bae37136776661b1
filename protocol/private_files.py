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

    ``exclusive``: write ``path`` itself, only if it does not exist (else FileExistsError),
    for a file that must never be replaced, such as a newly generated key.
    """
    private_folder(path.parent)
    target = path if exclusive else path.with_name(path.name + ".tmp")
    fd = _open_private(target, os.O_EXCL if exclusive else os.O_TRUNC)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    if not exclusive:
        os.replace(target, path)


def write_private(path: Path, data: bytes | str) -> None:
    """Replace ``path`` by ``data`` (str as UTF-8) atomically, mode 0600 (folders 0700)."""
    with private_file(path) as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
