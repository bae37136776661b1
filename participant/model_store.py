"""A job's trained models on the agent's disk, so an agent restarted mid-job resumes.

One ``.npz`` file per job and algorithm in the agent's state folder, written atomically
(a temporary file, then a rename) and private to the agent's user (mode 0600, folders 0700:
:mod:`infra.private_files`; the models and labels describe the rows): small ``facts``
(architecture, flags; stored as ``meta.<name>``) and the named ``arrays`` under their own
names (e.g. ``labels``, readable with ``numpy.load``). A damaged file is refused with a reason
for the coordinator.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from fedclust.core.errors import RefusedError
from fedclust.infra.private_files import private_file

__all__ = ["load_arrays", "save_arrays"]

_FACT = "meta."
Arrays = dict[str, NDArray[np.generic]]


def save_arrays(
    path: Path, facts: Mapping[str, NDArray[np.generic]], arrays: Mapping[str, NDArray[np.generic]]
) -> None:
    """Replace ``path`` by the given facts and arrays (atomically, mode 0600)."""
    content = {_FACT + k: np.asarray(v) for k, v in facts.items()}
    if any(k.startswith(_FACT) for k in arrays):
        raise ValueError(f"array names must not start with {_FACT!r}")
    content.update({k: np.asarray(v) for k, v in arrays.items()})
    with private_file(path) as handle:
        np.savez(handle, allow_pickle=False, **content)


def load_arrays(path: Path) -> tuple[Arrays, Arrays] | None:
    """The (facts, arrays) saved at ``path``; None when there is no such file."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            items = {name: saved[name] for name in saved.files}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, zipfile.BadZipFile):
        raise RefusedError(
            "the agent's saved models of this job are damaged; its operator must remove them"
        ) from None
    facts = {k[len(_FACT):]: v for k, v in items.items() if k.startswith(_FACT)}
    arrays = {k: v for k, v in items.items() if not k.startswith(_FACT)}
    return facts, arrays
