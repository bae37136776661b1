"""Files 0600 and folders 0700 whatever the umask; whole files replaced atomically."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedclust.infra.private_files import (
    create_private,
    private_file,
    private_folder,
    write_private,
)
from fedclust.infra.sqlite_file import create_private_sqlite


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000, 0o277], ids=["022", "000", "277"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_new_folders_are_0700_and_existing_ones_keep_their_mode(
    tmp_path: Path, umask: int
) -> None:
    os.chmod(tmp_path, 0o755)
    deep = private_folder(tmp_path / "a" / "b" / "c")
    assert [mode(p) for p in (deep, deep.parent, deep.parent.parent)] == [0o700] * 3
    assert mode(tmp_path) == 0o755
    assert private_folder(deep) == deep  # again: nothing to do


def test_written_files_are_0600_and_replace_a_wider_old_file(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "state" / "rosters.json"
    write_private(target, "first")
    assert (target.read_text(), mode(target), mode(target.parent)) == ("first", 0o600, 0o700)
    os.chmod(target, 0o644)
    write_private(target, b"second")
    assert (target.read_bytes(), mode(target)) == (b"second", 0o600)
    assert sorted(p.name for p in target.parent.iterdir()) == ["rosters.json"]  # no leftovers


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "model.npz"
    write_private(target, b"old")
    with pytest.raises(RuntimeError), private_file(target) as handle:
        handle.write(b"half")
        raise RuntimeError("the writer failed")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.npz"]


def test_a_link_planted_at_the_old_temporary_name_is_not_followed(tmp_path: Path) -> None:
    """``state.json.tmp`` was the fixed temporary name: a link planted there made a write
    overwrite the link's target."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "state.json"
    (tmp_path / "state.json.tmp").symlink_to(victim)
    write_private(target, "state")
    assert (target.read_text(), victim.read_text()) == ("state", "precious")
    assert not target.is_symlink() and mode(target) == 0o600


def test_each_write_has_its_own_temporary_and_leaves_none(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    with private_file(target) as first, private_file(target) as second:
        first.write(b"first")
        second.write(b"second")
        temporaries = {p.name for p in tmp_path.iterdir()}
        assert len(temporaries) == 2 and all(n.endswith(".tmp") for n in temporaries)
    assert target.read_bytes() == b"first"  # the outer block ends last: its content stays
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_an_exclusive_file_is_never_replaced(tmp_path: Path, umask: int) -> None:
    key = tmp_path / "keys" / "identity.key"
    with private_file(key, exclusive=True) as handle:
        handle.write(b"secret")
    assert (mode(key), mode(key.parent)) == (0o600, 0o700)
    with pytest.raises(FileExistsError), private_file(key, exclusive=True) as handle:
        handle.write(b"another")
    assert key.read_bytes() == b"secret"


def test_create_private_leaves_an_existing_file_alone(tmp_path: Path, umask: int) -> None:
    log = tmp_path / "logs" / "audit.jsonl"
    assert create_private(log) and (mode(log), mode(log.parent)) == (0o600, 0o700)
    log.write_text("line\n")
    os.chmod(log, 0o640)
    assert not create_private(log)
    assert (log.read_text(), mode(log)) == ("line\n", 0o640)


def test_a_sqlite_database_and_its_new_folder_are_private(tmp_path: Path, umask: int) -> None:
    database = tmp_path / "coordinator" / "coordinator.db"
    create_private_sqlite(f"sqlite:///{database}")
    assert (mode(database), mode(database.parent)) == (0o600, 0o700)
    create_private_sqlite("sqlite://")  # memory: nothing on disk
    create_private_sqlite(f"postgresql+psycopg://u@host/{tmp_path / 'db'}")
    assert not (tmp_path / "db").exists()
