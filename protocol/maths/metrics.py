"""External evaluation metrics: agreement with known labels or known centers.

These need ground truth, so they serve the simulator and the benchmarks, never a real
federation (a participant never sends labels).

- :func:`adjusted_rand`: Hubert & Arabie's adjusted Rand index (scikit-learn's).
- :func:`client_weighted_ari`: the mean of every client's own ARI weighted by its size, as
  Garst & Reinders 2023 report beside the pooled ARI.
- :func:`clustering_accuracy`: the fraction of points on the diagonal of the contingency table
  after the best one-to-one relabelling (Hungarian algorithm).
- :func:`center_distance`: mean Euclidean distance between true and found centers under the
  best one-to-one matching (Hungarian algorithm).
- :func:`knowledge_gap`: Stallmann & Wilbik 2022 (eq. 18), the sum over centers of one set of
  the distance to the closest center of another set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score

from fedclust.core.validation import FloatArray, check_centers, check_data

__all__ = [
    "adjusted_rand", "center_distance", "client_weighted_ari", "clustering_accuracy",
    "knowledge_gap",
]


def _check_labels(
    labels_true: ArrayLike, labels_pred: ArrayLike
) -> tuple[NDArray[np.generic], NDArray[np.generic]]:
    t = np.asarray(labels_true)
    p = np.asarray(labels_pred)
    for name, arr in (("labels_true", t), ("labels_pred", p)):
        if arr.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array; got an array of shape {arr.shape}.")
        if arr.shape[0] == 0:
            raise ValueError(f"{name} must hold at least one label; got none.")
    if t.shape != p.shape:
        raise ValueError(
            f"labels_true and labels_pred must have the same length; got {t.shape[0]} and "
            f"{p.shape[0]}."
        )
    return t, p


def adjusted_rand(labels_true: ArrayLike, labels_pred: ArrayLike) -> float:
    """Adjusted Rand index (Hubert & Arabie 1985): 1 for identical partitions, ~0 for random."""
    t, p = _check_labels(labels_true, labels_pred)
    return float(adjusted_rand_score(t, p))


def client_weighted_ari(
    labels_true: Sequence[ArrayLike], labels_pred: Sequence[ArrayLike]
) -> float:
    """Client-weighted ARI (Garst & Reinders 2023): Σ_l n_l · ARI(y_l, ŷ_l) / Σ_l n_l.

    Each client's ARI compares only its own rows' partitions, so a clustering that is right
    within every client but splits a true cluster across clients scores higher here than in
    the pooled :func:`adjusted_rand`. A client whose rows all share one true label and one
    predicted label has ARI 1 (scikit-learn's convention for identical trivial partitions).

    Args:
        labels_true, labels_pred: one 1-D label array per client, in the same order.
    """
    if len(labels_true) != len(labels_pred):
        raise ValueError(
            f"labels_true and labels_pred must hold one array per client; got "
            f"{len(labels_true)} and {len(labels_pred)}."
        )
    if len(labels_true) == 0:
        raise ValueError("client_weighted_ari needs at least one client; got none.")
    checked = [_check_labels(t, p) for t, p in zip(labels_true, labels_pred, strict=True)]
    sizes = np.array([t.shape[0] for t, _ in checked], dtype=np.float64)
    scores = np.array([adjusted_rand_score(t, p) for t, p in checked], dtype=np.float64)
    return float(np.dot(sizes, scores) / sizes.sum())


def clustering_accuracy(labels_true: ArrayLike, labels_pred: ArrayLike) -> float:
    """Accuracy under the best one-to-one mapping of predicted to true labels.

    ACC = max_s (1/N) Σ_j [labels_true_j = s(labels_pred_j)], s injective, found with the
    Hungarian algorithm on the contingency table. Label values are arbitrary (any hashable
    comparable type). With different numbers of clusters only min(K_true, K_pred) pairs are
    matched, so points of unmatched clusters count as errors.
    """
    t, p = _check_labels(labels_true, labels_pred)
    _, ti = np.unique(t, return_inverse=True)
    _, pi = np.unique(p, return_inverse=True)
    table = np.zeros((int(pi.max()) + 1, int(ti.max()) + 1), dtype=np.int64)
    np.add.at(table, (pi, ti), 1)
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum()) / float(t.shape[0])


def _pairwise_euclidean(A: FloatArray, B: FloatArray) -> FloatArray:
    diff = A[:, None, :] - B[None, :, :]
    out: FloatArray = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
    return out


def center_distance(C_true: ArrayLike, C_pred: ArrayLike) -> float:
    """Mean Euclidean distance between matched centers under the best one-to-one matching.

    The matching minimises the total distance (Hungarian algorithm). When the numbers of
    centers differ, min(K_true, K_pred) pairs are matched and the surplus centers of the larger
    set are ignored; the result is the MEAN over the matched pairs (0 iff every center of the
    smaller set coincides with a distinct center of the larger one).
    """
    A = check_data(C_true, name="C_true")
    B = check_centers(C_pred, n_features=A.shape[1], name="C_pred")
    D = _pairwise_euclidean(A, B)
    rows, cols = linear_sum_assignment(D)
    return float(D[rows, cols].mean())


def knowledge_gap(
    centers: ArrayLike,
    reference: ArrayLike,
    *,
    metric: Literal["euclidean", "seuclidean"] = "euclidean",
) -> float:
    """Knowledge gap (Stallmann & Wilbik 2022, eq. 18): Σ_i min_j d(centers_i, reference_j).

    The sum, over the centers of the first set, of the distance to the closest center of the
    second set; 0 iff every center lies on a reference center. It is not symmetric and not a
    matching: several centers may share one closest reference center.

    ``metric="euclidean"`` uses ||·||_2. ``metric="seuclidean"`` is the standardised Euclidean
    distance that the authors' code passes to scipy's cdist by default: each coordinate is
    divided by its sample variance (ddof=1) over the two center sets stacked together,
    d(a, b) = sqrt(Σ_k (a_k - b_k)² / V_k) (needs at least two distinct values per column).
    """
    A = check_data(centers, name="centers")
    B = check_centers(reference, n_features=A.shape[1], name="reference")
    if metric == "euclidean":
        D = _pairwise_euclidean(A, B)
    elif metric == "seuclidean":
        V = np.var(np.vstack([A, B]), axis=0, ddof=1)
        if not (V > 0).all():
            raise ValueError(
                "metric='seuclidean' needs every column of the stacked centers to vary; "
                "use metric='euclidean'."
            )
        scale = 1.0 / np.sqrt(V)
        D = _pairwise_euclidean(A * scale, B * scale)
    else:
        raise ValueError(
            f"The 'metric' parameter of knowledge_gap must be 'euclidean' or 'seuclidean'. "
            f"Got {metric!r} instead."
        )
    return float(D.min(axis=1).sum())
