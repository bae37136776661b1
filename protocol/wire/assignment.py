"""Labelling one's own rows with a finished job's centers, computed where the rows are.

A participant of a finished job fetches :class:`ParticipantResult` (the job's result document
and its fuzzifier m) and labels its rows locally; nothing data-dependent leaves. The same
functions back the estimators' ``predict``/``predict_proba`` (:mod:`fedclust.estimators`).

- Hard labels: the nearest center (``protocol.maths._fuzzy.nearest``, as the simulator's
  evaluation assigns rows).
- Memberships: for the fuzzy algorithms ("ffcm", "fedfcm", "fedfcm-avg") the FCM memberships
  with the job's m (Bezdek 1981, eq. 11.3a); for the k-means algorithms ("fkm", "kfed") the
  one-hot encoding of the hard label (a crisp partition has memberships 0 or 1).
- A standardised job clustered z-scores ``(x - mean) / scale``: distances and memberships are
  computed there, with the centers mapped back by the same mean and scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict, Field

from fedclust.core.validation import FloatArray, check_centers, check_data
from fedclust.protocol import algorithms
from fedclust.protocol.maths._fuzzy import memberships, nearest
from fedclust.protocol.wire.messages import (
    PROTOCOL_VERSION,
    AnyAlgorithm,
    Identifier,
    ResultDocument,
    SweepEntryDocument,
)

__all__ = [
    "Assignment",
    "ParticipantResult",
    "assign",
    "assign_trusted",
    "released_centers",
    "sweep_entry",
]

#: Algorithms whose memberships are fuzzy; the others' are one-hot.


class ParticipantResult(BaseModel):
    """A finished job's result as a member participant fetches it to label its own rows
    (``GET /api/v1/participants/jobs/{job_id}/result``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol_version: Literal[5] = PROTOCOL_VERSION
    job_id: Identifier
    m: float = Field(gt=1.0, le=100.0, description="The job's fuzzifier (memberships).")
    result: ResultDocument


@dataclass(frozen=True)
class Assignment:
    """Hard labels (N,) and memberships (N, K) of rows to K released centers."""

    labels: NDArray[np.intp]
    memberships: FloatArray


def sweep_entry(doc: ResultDocument, k: int | None = None) -> SweepEntryDocument:
    """The sweep entry of K = ``k`` (default: the document's ``k_selected``).

    Raises:
        ValueError: the document has no sweep (a model-based job) or no entry for that K.
    """
    if not doc.sweep:
        raise ValueError(f"a {doc.algorithm!r} result has no centers to label rows with.")
    want = doc.k_selected if k is None else k
    for entry in doc.sweep:
        if entry.k == want:
            return entry
    ks = ", ".join(str(e.k) for e in doc.sweep)
    raise ValueError(f"the result has no sweep entry for K={want}; it has K={ks}.")


def released_centers(entry: SweepEntryDocument) -> tuple[FloatArray, list[int]]:
    """The released centers of ``entry`` (withheld ones, None, left out) and their indices.

    Raises:
        ValueError: every center of the entry is withheld.
    """
    kept = [j for j, c in enumerate(entry.centers) if c is not None]
    if not kept:
        raise ValueError(f"every center of K={entry.k} is withheld; no rows can be labelled.")
    return np.array([entry.centers[j] for j in kept], dtype=np.float64), kept


def assign(
    X: ArrayLike,
    centers: ArrayLike,
    *,
    algorithm: AnyAlgorithm,
    m: float,
    mean: ArrayLike | None = None,
    scale: ArrayLike | None = None,
) -> Assignment:
    """Label the rows ``X`` with ``centers`` (both in the data's original units).

    With ``mean`` and ``scale`` (a standardised job) both are z-scored first, so distances
    are those the job clustered with.

    Raises:
        ValueError: X or the centers are not finite 2-D arrays of the same width, or only
            one of mean and scale is given.
    """
    Xa = check_data(X)
    C = check_centers(centers, n_features=Xa.shape[1])
    if (mean is None) != (scale is None):
        raise ValueError("give both mean and scale, or neither.")
    if mean is not None and scale is not None:
        mu = np.asarray(mean, dtype=np.float64)
        sd = np.asarray(scale, dtype=np.float64)
        if mu.shape != (Xa.shape[1],) or sd.shape != (Xa.shape[1],) or not (sd > 0).all():
            raise ValueError(
                f"mean and scale must be vectors of n_features={Xa.shape[1]} values, "
                "scale positive."
            )
        Xa = (Xa - mu) / sd
        C = (C - mu) / sd
    return assign_trusted(Xa, C, fuzzy=algorithms.get(algorithm).fuzzy, m=m)


def assign_trusted(X: FloatArray, C: FloatArray, *, fuzzy: bool, m: float) -> Assignment:
    """:func:`assign` on validated arrays already in the clustering's units."""
    labels = nearest(X, C)
    if fuzzy:
        U = memberships(X, C, m)
    else:
        U = np.zeros((X.shape[0], C.shape[0]))
        U[np.arange(X.shape[0]), labels] = 1.0
    return Assignment(labels=labels, memberships=U)
