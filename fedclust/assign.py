"""``fedclust participant assign``: label one's own rows with a finished job's centers.

The participant fetches the job's centers with its own token (one ``GET``, no body:
``/api/v1/participants/jobs/{job_id}/result``, answered only for a member of the job), loads
its data as its agent does, and computes each row's nearest center and memberships locally
(:func:`protocol.wire.assignment.assign`). Nothing data-dependent leaves the organisation.

A standardised job clustered z-scores with the federation's mean and scale, which the result
document does not hold; the agent saved them with the job's state (``state_dir/jobs/<job>.json``,
:class:`participant.agent.StateStore`), and they are read from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedclust.client import ApiError
from fedclust.core.validation import IDENTIFIER_TEXT, is_identifier
from fedclust.participant.agent import StateStore
from fedclust.participant.config import ParticipantConfig, load_rows
from fedclust.protocol.wire.assignment import (
    Assignment,
    ParticipantResult,
    assign,
    released_centers,
    sweep_entry,
)

__all__ = [
    "AssignedRows",
    "assign_job",
    "fetch_result",
    "labels_frame",
    "saved_standardisation",
    "write_labels",
]

_TIMEOUT: Final = 30.0


def fetch_result(
    config: ParticipantConfig, job_id: str, *, transport: httpx.BaseTransport | None = None
) -> ParticipantResult:
    """The job's result as this participant may see it (one GET with its bearer token).

    Raises:
        ValueError: ``job_id`` is not a job identifier.
        ApiError: the coordinator refused (404: no such job of this participant; 409: the
            job has not succeeded or has no centers).
    """
    if not is_identifier(job_id):
        raise ValueError(f"--job must be {IDENTIFIER_TEXT}.")
    with httpx.Client(
        base_url=config.coordinator_url + "/api/v1",
        headers=config.auth_headers,
        transport=transport,
        timeout=_TIMEOUT,
        verify=config.tls.httpx_verify(),
    ) as client:
        response = client.get(f"/participants/jobs/{job_id}/result")
    if response.status_code != 200:
        try:
            detail = str(response.json().get("detail", response.reason_phrase))
        except (ValueError, AttributeError):
            detail = response.reason_phrase
        raise ApiError(response.status_code, detail)
    return ParticipantResult.model_validate_json(response.content)


def saved_standardisation(
    config: ParticipantConfig, job_id: str
) -> tuple[np.ndarray, np.ndarray]:
    """The federation's mean and scale the agent applied in ``job_id`` (the last one).

    Raises:
        ValueError: the agent's state folder holds none for this job, or the file is damaged.
    """
    store = StateStore(config.state_dir)
    state = store.load(job_id)
    if not state.standardisations:
        raise ValueError(
            f"job {job_id!r} standardised the data, but {store.path(job_id)} holds no saved "
            "standardisation; run assign with the agent's state_dir."
        )
    last = state.standardisations[-1]
    return np.asarray(last.mean, dtype=np.float64), np.asarray(last.scale, dtype=np.float64)


@dataclass(frozen=True)
class AssignedRows:
    """Rows labelled with a job's released centers: the assignment, the K of the sweep
    entry used, the indices (in that entry) of its released centers, each row's index among
    the data file's rows (rows the loader left out counted, so it joins back to the file)
    and, when asked, the values of the file's id column."""

    assignment: Assignment
    k: int
    centers: list[int]
    rows: NDArray[np.int64]
    id_column: str | None = None
    ids: NDArray[np.str_] | None = None

    @property
    def withheld(self) -> list[int]:
        """Indices of the entry's centers that were withheld (not used)."""
        return [j for j in range(self.k) if j not in self.centers]


def assign_job(
    config: ParticipantConfig,
    job_id: str,
    *,
    k: int | None = None,
    id_column: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> AssignedRows:
    """Fetch ``job_id``'s centers of K = ``k`` (default: the selected K) and label this
    participant's rows with them, locally; ``id_column`` names a column of the data file
    whose values go with the labels.

    Raises:
        ValueError: the data's width differs from the centers', the job has no entry for
            ``k``, its standardisation is not saved here, or ``id_column`` is missing or
            takes an output column's name.
        ApiError: the coordinator refused the request.
    """
    if id_column is not None and (id_column in ("row", "label") or id_column.startswith(
        "membership_"
    )):
        raise ValueError(
            f"--id-column {id_column!r} would clash with the output's own columns (row, label, "
            "membership_*)."
        )
    fetched = fetch_result(config, job_id, transport=transport)
    doc = fetched.result
    entry = sweep_entry(doc, k)
    centers, kept = released_centers(entry)
    loaded = load_rows(config.data, id_column=id_column)
    X = loaded.X
    if X.shape[1] != centers.shape[1]:
        raise ValueError(
            f"the data file has {X.shape[1]} features, but job {job_id!r}'s centers have "
            f"{centers.shape[1]}."
        )
    mean = scale = None
    if doc.standardised:
        mean, scale = saved_standardisation(config, job_id)
    result = assign(X, centers, algorithm=doc.algorithm, m=fetched.m, mean=mean, scale=scale)
    assert loaded.rows is not None  # load_rows numbers every row
    return AssignedRows(result, entry.k, kept, loaded.rows, id_column, loaded.ids)


def labels_frame(rows: AssignedRows) -> pd.DataFrame:
    """Columns ``row``, the id column if one was asked for, ``label`` and ``membership_0`` ..
    ``membership_{K-1}``.

    ``row`` is the row's 0-based index among the data file's rows (a header and blank lines
    not counted, rows left out for a missing value counted): ``pandas.read_csv(file)``'s
    index. ``label`` and the membership columns number the released centers in order (with
    none withheld, the sweep entry's centers).
    """
    U = rows.assignment.memberships
    frame = pd.DataFrame({"row": rows.rows})
    if rows.id_column is not None and rows.ids is not None:
        frame[rows.id_column] = rows.ids
    frame["label"] = rows.assignment.labels
    for j in range(U.shape[1]):
        frame[f"membership_{j}"] = U[:, j]
    return frame


def write_labels(frame: pd.DataFrame, out: Path) -> None:
    """Write the labels CSV (full float precision), creating its folder."""
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False)
