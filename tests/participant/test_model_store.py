"""A job's saved models: atomic round trip, readable names, clear refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedclust.core.errors import RefusedError
from fedclust.participant.model_store import load_arrays, save_arrays


def test_round_trip_keeps_facts_and_arrays_apart(tmp_path: Path) -> None:
    path = tmp_path / "jobs" / "job-1.fedcref.npz"
    assert load_arrays(path) is None
    labels = np.array([0, 1, 1, 0])
    save_arrays(path, {"hidden": np.array([8, 4])}, {"labels": labels, "fc.weight": np.eye(2)})
    with np.load(path) as raw:  # an operator reads the assignment by its plain name
        assert np.array_equal(raw["labels"], labels)
    saved = load_arrays(path)
    assert saved is not None
    facts, arrays = saved
    assert list(facts) == ["hidden"] and sorted(arrays) == ["fc.weight", "labels"]
    assert not (tmp_path / "jobs" / "job-1.fedcref.npz.tmp").exists()


def test_reserved_names_and_damaged_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    with pytest.raises(ValueError, match="must not start"):
        save_arrays(path, {}, {"meta.x": np.zeros(1)})
    path.write_bytes(b"\x00" * 10)
    with pytest.raises(RefusedError, match="damaged"):
        load_arrays(path)
