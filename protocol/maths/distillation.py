"""Clustered federated distillation of Yang & Tae (2023), "Federated Distillation Methodology
for Label-Based Group Structures", Appl. Sci. 14(1), 277 — the pure numpy part.

Two statistics leave a client l: its count vector c_l ∈ R^L of argmax labels on the public
set (:func:`participant_label_counts`, disclosed per client) and its soft contribution
(P_l, 1), the softmax probabilities on the public set and a count
(:func:`participant_soft_contribution`, sum-type). The coordinator min-max scales each label
COLUMN of the clients × labels matrix to [0, 1] (:func:`scale_counts`; a constant column
gives 0), groups the clients by Ward agglomerative clustering under a distance threshold
(:func:`group_clients`, default 2, the paper's; fewer than two clients form one group) and
forms each group's teacher T_g = (Σ_{l∈g} P_l) / |g| from the sums (:func:`combine_teacher`);
:func:`global_groups` is FedDF's single group. Evaluation: :func:`grouping_ari`,
:func:`group_means`. The contribution keys are :data:`LABEL_COUNTS`, :data:`SOFT_SUM` and
:data:`COUNT`. The paper's section and equation numbers are not cited (see the notes).

Design notes: ``docs/fed-distill.md`` (§ The numpy core).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.cluster import AgglomerativeClustering
from sklearn.metrics import adjusted_rand_score

from fedclust.core.errors import ProtocolError
from fedclust.core.validation import FloatArray, check_data, check_float, check_int

__all__ = [
    "COUNT",
    "LABEL_COUNTS",
    "SOFT_SUM",
    "combine_teacher",
    "global_groups",
    "group_clients",
    "group_means",
    "grouping_ari",
    "groups_as_lists",
    "participant_label_counts",
    "participant_soft_contribution",
    "scale_counts",
]

LABEL_COUNTS = "label_counts"
SOFT_SUM = "soft_sum"
COUNT = "count"

IntArray = NDArray[np.int64]

#: Row sums of a softmax output must be 1 up to float32 rounding over a few classes.
_ROW_SUM_TOL = 1e-3


def _check_probabilities(probs: ArrayLike, *, name: str, owner: str) -> FloatArray:
    P = check_data(probs, name=name)
    if P.shape[1] < 2:
        raise ValueError(f"{name} of {owner} must have at least 2 classes; got shape {P.shape}.")
    if (P < 0.0).any() or not np.allclose(P.sum(axis=1), 1.0, atol=_ROW_SUM_TOL):
        raise ValueError(
            f"{name} of {owner} must hold probabilities (non-negative rows summing to 1)."
        )
    return P


def participant_label_counts(probs: ArrayLike) -> dict[str, FloatArray]:
    """The count vector of one client (Yang & Tae 2023): c_j = #{public rows with argmax j}.

    Args:
        probs: the client's softmax probabilities on the public set, (n_public, n_classes).

    Returns:
        ``{LABEL_COUNTS: c}`` with c of shape (n_classes,), float64 (ties go to the lowest
        label, numpy's argmax).
    """
    P = _check_probabilities(probs, name="probs", owner="participant_label_counts")
    counts = np.bincount(np.argmax(P, axis=1), minlength=P.shape[1]).astype(np.float64)
    return {LABEL_COUNTS: counts}


def participant_soft_contribution(probs: ArrayLike) -> dict[str, FloatArray]:
    """One client's sum-type contribution to its group's teacher: (P_l, 1).

    Summed over a group g it gives (Σ_{l∈g} P_l, |g|), which ``combine_teacher`` divides.
    """
    P = _check_probabilities(probs, name="probs", owner="participant_soft_contribution")
    return {SOFT_SUM: P, COUNT: np.ones(1)}


def scale_counts(counts: ArrayLike) -> FloatArray:
    """Min-max scale the clients × labels count matrix per label (column) to [0, 1].

    ``s_lj = (c_lj - min_l c_lj) / (max_l c_lj - min_l c_lj)``; a constant column (including
    the single-client case) scales to 0, as scikit-learn's MinMaxScaler does.

    Args:
        counts: shape (n_clients, n_classes), non-negative, finite.
    """
    C = check_data(counts, name="counts")
    if (C < 0.0).any():
        raise ValueError("counts must be non-negative.")
    low = C.min(axis=0)
    span = C.max(axis=0) - low
    scaled = np.zeros_like(C)
    varying = span > 0.0
    scaled[:, varying] = (C[:, varying] - low[varying]) / span[varying]
    return scaled


def _canonical(labels: NDArray[np.integer]) -> IntArray:
    """Relabel groups 0, 1, ... in order of their first member (a deterministic naming)."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))
    return order[inverse].astype(np.int64)


def group_clients(scaled_counts: ArrayLike, *, distance_threshold: float = 2.0) -> IntArray:
    """Group clients by their scaled count vectors (Yang & Tae 2023).

    Agglomerative clustering, Ward linkage, Euclidean distance, merging stops at
    ``distance_threshold`` (scikit-learn's ``AgglomerativeClustering(n_clusters=None,
    distance_threshold=...)``; Ward's merge distance between clusters A and B is
    sqrt(2|A||B|/(|A|+|B|))·||mean_A - mean_B||). Deterministic.

    Fallback: with a single client (scikit-learn needs two rows) it forms one group.

    Returns:
        Group labels, shape (n_clients,), numbered 0, 1, ... in order of first member.
    """
    S = check_data(scaled_counts, name="scaled_counts")
    threshold = check_float(
        distance_threshold, name="distance_threshold", owner="group_clients", low=0.0,
        low_open=True,
    )
    if S.shape[0] < 2:
        return np.zeros(S.shape[0], dtype=np.int64)
    model = AgglomerativeClustering(
        n_clusters=None, distance_threshold=threshold, linkage="ward", metric="euclidean"
    )
    return _canonical(model.fit_predict(S))


def global_groups(n_clients: int) -> IntArray:
    """FedDF-style global averaging (Lin et al. 2020): one group of every client."""
    n = check_int(n_clients, name="n_clients", owner="global_groups", low=1)
    return np.zeros(n, dtype=np.int64)


def groups_as_lists(labels: ArrayLike) -> list[list[int]]:
    """Member indices of each group, groups in label order, members ascending."""
    lab = np.asarray(labels, dtype=np.int64)
    return [np.flatnonzero(lab == g).tolist() for g in np.unique(lab)]


def combine_teacher(total: Mapping[str, ArrayLike]) -> FloatArray:
    """A group's teacher T_g = (Σ_{l∈g} P_l) / |g| from the group's summed contributions.

    Args:
        total: the element-wise sum of the members' ``participant_soft_contribution``
            dictionaries: ``SOFT_SUM`` of shape (n_public, n_classes) and ``COUNT`` of shape
            (1,) equal to the number of members.

    Raises:
        ProtocolError: missing keys, a count below 1 or not an integer, non-finite sums, or
            a mean that is not a probability matrix.
    """
    if SOFT_SUM not in total or COUNT not in total:
        raise ProtocolError(f"a teacher needs the keys {SOFT_SUM!r} and {COUNT!r}.")
    S = np.asarray(total[SOFT_SUM], dtype=np.float64)
    n = np.asarray(total[COUNT], dtype=np.float64).reshape(-1)
    if S.ndim != 2 or n.shape != (1,):
        raise ProtocolError(
            f"{SOFT_SUM} must be 2-D and {COUNT} a single value; got shapes {S.shape}, {n.shape}."
        )
    count = float(n[0])
    if not np.isfinite(count) or count < 1.0 or abs(count - round(count)) > 1e-6:
        raise ProtocolError(f"{COUNT} must be a whole number >= 1.")
    if not np.isfinite(S).all():
        raise ProtocolError(f"{SOFT_SUM} contains NaN or infinity.")
    T = S / round(count)
    if (T < -_ROW_SUM_TOL).any() or not np.allclose(T.sum(axis=1), 1.0, atol=_ROW_SUM_TOL):
        raise ProtocolError("the group mean is not a probability matrix (rows must sum to 1).")
    return T


def grouping_ari(true_groups: ArrayLike, found_groups: ArrayLike) -> float:
    """Adjusted Rand index of the found grouping against the true one (1 = identical)."""
    t = np.asarray(true_groups).reshape(-1)
    f = np.asarray(found_groups).reshape(-1)
    if t.shape != f.shape or t.size == 0:
        raise ValueError(
            f"true_groups and found_groups must be non-empty and of equal length; got "
            f"{t.size} and {f.size}."
        )
    return float(adjusted_rand_score(t, f))


def group_means(values: Sequence[float], labels: ArrayLike) -> FloatArray:
    """Mean of ``values`` (e.g. client accuracies) within each group, groups in label order."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    lab = np.asarray(labels, dtype=np.int64).reshape(-1)
    if v.shape != lab.shape:
        raise ValueError(f"values and labels must have equal length; got {v.size}, {lab.size}.")
    return np.array([v[lab == g].mean() for g in np.unique(lab)], dtype=np.float64)
