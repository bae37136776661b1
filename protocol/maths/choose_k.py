"""Choosing the number of clusters K (Stallmann & Wilbik 2022, §2.2.3).

The framework: every participant picks its own K_l from a local-only sweep (local FCM and the
soft Davies-Bouldin index, :func:`participant_local_k`); the coordinator turns the local
choices into a search range with the rule of thumb K_min = min_l K_l,
K_max = K_min + max_l K_l (:func:`k_range_rule_of_thumb`); it then runs the federated
clustering for every K in the range, scores each with FedFuzzDB
(:func:`protocol.maths.validity.combine_fuzzy_db`) and keeps the minimum (:func:`select_minimum`).
:func:`select_elbow` serves curves without a minimum at the right K (e.g. the FCM objective):
the point deepest below the chord joining the curve's ends, never a bump.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedclust.core.validation import FloatArray, check_data, check_int, rng_from

from .fcm import fcm
from .validity import soft_davies_bouldin

__all__ = [
    "k_range_rule_of_thumb",
    "participant_local_k",
    "select_elbow",
    "select_minimum",
    "soft_db_curve",
]


def _check_curve(
    ks: Sequence[int], scores: ArrayLike, owner: str, *, allow_inf: bool
) -> tuple[NDArray[np.int64], FloatArray]:
    """Validate a (K, score) curve and return it sorted by K."""
    k_list = [check_int(k, name="ks", owner=owner, low=1) for k in ks]
    s = np.asarray(scores, dtype=np.float64)
    if len(k_list) == 0:
        raise ValueError(f"ks of {owner} must hold at least one K; got none.")
    if s.shape != (len(k_list),):
        raise ValueError(
            f"scores of {owner} must be a 1-D array with one score per K, shape "
            f"({len(k_list)},); got shape {s.shape}."
        )
    if len(set(k_list)) != len(k_list):
        raise ValueError(f"ks of {owner} must be distinct.")
    bad = np.isnan(s) | (np.isinf(s) if not allow_inf else np.isneginf(s))
    if bad.any():
        what = "finite" if not allow_inf else "a number or +inf"
        raise ValueError(f"scores of {owner} must each be {what}.")
    k_arr = np.asarray(k_list, dtype=np.int64)
    order = np.argsort(k_arr, kind="stable")
    return k_arr[order], s[order]


def select_minimum(ks: Sequence[int], scores: ArrayLike) -> int:
    """The K with the lowest score (Stallmann & Wilbik §2.2.3); ties go to the smallest K.

    ``+inf`` is allowed (e.g. coincident centers) and never wins unless every score is +inf.
    """
    k_arr, s = _check_curve(ks, scores, "select_minimum", allow_inf=True)
    return int(k_arr[int(np.argmin(s))])  # argmin returns the first, i.e. smallest K, of ties


def select_elbow(ks: Sequence[int], scores: ArrayLike) -> int:
    """The elbow of a lower-is-better score curve: its deepest point below the chord.

    Rule: min-max scale K and the scores to [0, 1], draw the chord from the first to the last
    point and return the K farthest below it (depths rounded to 12 decimals; ties to the
    smallest K). No point below the chord (straight, flat or concave curve): the K of the
    lowest score. Needs at least 3 points. Source: the knee of kneedle (Satopää et al. 2011),
    depth below the chord only, so a bump is never the elbow.
    """
    owner = "select_elbow"
    k_arr, s = _check_curve(ks, scores, owner, allow_inf=False)
    if k_arr.shape[0] < 3:
        raise ValueError(
            f"ks of {owner} must hold at least 3 values to have an elbow; got {k_arr.shape[0]}."
        )
    span = float(s.max() - s.min())
    if span == 0.0:
        return int(k_arr[0])
    x = (k_arr - k_arr[0]) / float(k_arr[-1] - k_arr[0])
    y = (s - s.min()) / span
    depth = np.round(y[0] + (y[-1] - y[0]) * x - y, 12)  # chord minus curve: > 0 below it
    best = int(np.argmax(depth))  # argmax/argmin return the first, i.e. smallest K, of ties
    return int(k_arr[best if depth[best] > 0.0 else int(np.argmin(s))])


def k_range_rule_of_thumb(local_ks: Sequence[int]) -> tuple[int, int]:
    """Search range from the participants' own choices (§2.2.3).

    K_min = min_l K_l and K_max = K_min + max_l K_l.
    """
    owner = "k_range_rule_of_thumb"
    ks = [check_int(k, name="local_ks", owner=owner, low=1) for k in local_ks]
    if not ks:
        raise ValueError(f"local_ks of {owner} must hold at least one K; got none.")
    k_min = min(ks)
    return k_min, k_min + max(ks)


def soft_db_curve(
    X: ArrayLike,
    ks: Sequence[int],
    *,
    m: float = 2.0,
    n_init: int = 5,
    seed: int | np.random.Generator | None = None,
) -> FloatArray:
    """Soft Davies-Bouldin index of the best-of-``n_init`` FCM fit of ``X`` for every K in ks.

    Restarts matter: a single FCM run often misses a small cluster and then favours a
    smaller K (seen on Stallmann & Wilbik's motivational example, whose middle cluster is small).
    """
    owner = "soft_db_curve"
    Xa = check_data(X)
    k_list = [check_int(k, name="ks", owner=owner, low=2) for k in ks]
    n_init = check_int(n_init, name="n_init", owner=owner, low=1)
    rng = rng_from(seed)
    out = np.empty(len(k_list))
    for idx, k in enumerate(k_list):
        centers = fcm(Xa, k, m=m, n_init=n_init, seed=rng).centers
        out[idx] = soft_davies_bouldin(Xa, centers, m=m)
    return out


def participant_local_k(
    X: ArrayLike,
    k_min: int,
    k_max: int,
    *,
    m: float = 2.0,
    seed: int | np.random.Generator | None = None,
    n_init: int = 5,
) -> int:
    """A participant's own K from a local-only sweep (Stallmann & Wilbik §2.2.3).

    For K = k_min..k_max: best-of-``n_init`` local FCM, scored by the soft Davies-Bouldin
    index (:func:`protocol.maths.validity.soft_davies_bouldin`); the K with the lowest index wins
    (ties: the smallest). K is capped at the number of local rows, so a small participant
    answers from the Ks it can fit. Nothing but the returned K leaves the participant.

    Raises:
        ValueError: k_min < 2 (the index needs two clusters), k_max < k_min, or fewer local
            rows than k_min.
    """
    owner = "participant_local_k"
    Xa = check_data(X)
    k_min = check_int(k_min, name="k_min", owner=owner, low=2)
    k_max = check_int(k_max, name="k_max", owner=owner, low=k_min)
    if Xa.shape[0] < k_min:
        raise ValueError(f"X has n_samples={Xa.shape[0]}, which should be >= k_min={k_min}.")
    ks = list(range(k_min, min(k_max, Xa.shape[0]) + 1))
    scores = soft_db_curve(Xa, ks, m=m, n_init=n_init, seed=seed)
    return select_minimum(ks, scores)
