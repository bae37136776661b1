"""FedCRef: Federated Cluster-Wise Refinement (Nardi, Valerio & Passarella), the numpy core.

Every step that needs no neural network; models travel as flat float32 vectors
(:class:`AutoencoderSpec`). Association (eq. 2): s_{i→j}(q, p) = P_α(d̃), the α-th percentile
over x ∈ q of d(x) = |e_own(x) − e_other(x)| min-max scaled to [0, 1] (per-sample
reconstruction MSE under i's model f_q and j's f_p); q and p are associated when
s_{i→j}(q, p) ≤ θ and s_{j→i}(p, q) ≤ θ (:func:`association_scores`, :func:`symmetric_edges`;
α = 75, θ = 0.2; the mutual best edge by default). Groups: connected components of >= 2
clusters (:func:`find_groups`). FedAvg: θ_g = Σ_l n_l θ_l / Σ_l n_l from sum-type
contributions (:func:`participant_fedavg_contribution`, :func:`combine_fedavg`). Refinement
(Algorithm 2): :func:`greedy_refinement`. Stopping: a client freezes at agreement ≥ τ = 0.8
(:func:`assignment_agreement`, :func:`client_frozen`); the run stops when group counts vary
≤ 10 % over three iterations (:func:`counts_stable`). Simulation: :func:`dirty_labels`,
:func:`count_wrong_associations`.

Design notes: ``docs/fedcref.md`` (§ The numpy core: θ and cluster size, the authors' code).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from fedclust.core.errors import ProtocolError
from fedclust.core.validation import FloatArray, check_data, check_float, check_int, rng_from

from .metrics import clustering_accuracy

__all__ = [
    "AutoencoderSpec",
    "ClusterRef",
    "FedCRefEvaluation",
    "Grouping",
    "assignment_agreement",
    "association_scores",
    "client_frozen",
    "combine_fedavg",
    "count_wrong_associations",
    "counts_stable",
    "dirty_labels",
    "find_groups",
    "greedy_refinement",
    "participant_fedavg_contribution",
    "symmetric_edges",
]

#: A local cluster: (participant index, local cluster index).
ClusterRef = tuple[int, int]


@dataclass(frozen=True)
class AutoencoderSpec:
    """The shared architecture: fully connected d-h_1-...-h_k encoder, mirrored decoder.

    ReLU after every layer but the last, sigmoid output (data in [0, 1]). The paper and the
    authors' code use d-100-64-32. Parameters travel as one float32 vector: for each layer in
    order (encoder, then decoder) the weight matrix (out, in) in row-major order, then its bias.
    """

    input_dim: int
    hidden: tuple[int, ...] = (100, 64, 32)

    def __post_init__(self) -> None:
        check_int(self.input_dim, name="input_dim", owner="AutoencoderSpec", low=1)
        if len(self.hidden) == 0:
            raise ValueError("The 'hidden' parameter of AutoencoderSpec must be non-empty.")
        for h in self.hidden:
            check_int(h, name="hidden", owner="AutoencoderSpec", low=1)

    @property
    def layer_dims(self) -> tuple[tuple[int, int], ...]:
        """(in, out) of every linear layer, encoder then decoder."""
        dims = (self.input_dim, *self.hidden, *reversed(self.hidden[:-1]), self.input_dim)
        return tuple((dims[i], dims[i + 1]) for i in range(len(dims) - 1))

    @property
    def n_params(self) -> int:
        """Length of the flat parameter vector."""
        return sum(i * o + o for i, o in self.layer_dims)

    def check_params(self, params: ArrayLike, *, name: str = "params") -> NDArray[np.float32]:
        """A flat finite float32 vector of length :attr:`n_params`, or ``ProtocolError``."""
        arr = np.asarray(params, dtype=np.float32)
        if arr.ndim != 1 or arr.shape[0] != self.n_params:
            raise ProtocolError(
                f"{name} must be a flat vector of {self.n_params} parameters for "
                f"{self.describe()}; got an array of shape {arr.shape}."
            )
        if not np.isfinite(arr).all():
            raise ProtocolError(f"{name} contains NaN or infinity.")
        return arr

    def describe(self) -> str:
        """E.g. ``"autoencoder 784-100-64-32"``."""
        return "autoencoder " + "-".join(str(v) for v in (self.input_dim, *self.hidden))


@dataclass(frozen=True)
class Grouping:
    """Federated groups (components with >= 2 clusters) and isolated clusters.

    Both are sorted (members within a group, groups by their first member) so that the same
    association graph always gives the same group numbering.
    """

    groups: tuple[tuple[ClusterRef, ...], ...]
    isolated: tuple[ClusterRef, ...]

    def group_of(self) -> dict[ClusterRef, int]:
        """Map every grouped cluster to its group index."""
        return {c: g for g, members in enumerate(self.groups) for c in members}

    def participants(self, g: int) -> tuple[int, ...]:
        """The distinct participant indices in group g (the members of its sums)."""
        return tuple(sorted({i for i, _ in self.groups[g]}))


@dataclass(frozen=True)
class FedCRefEvaluation:
    """What a simulator learns from true labels: mean local ACC and wrong associations.

    ``wrong_associations`` is None when no grouping was evaluated (e.g. the initial clustering).
    """

    mean_accuracy: float
    wrong_associations: int | None = None


def _check_errors(errors: ArrayLike, name: str) -> FloatArray:
    arr = np.asarray(errors, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinity.")
    return arr


def association_scores(
    own_errors: ArrayLike, other_errors: ArrayLike, *, alpha: float = 75.0
) -> FloatArray:
    """Scores s(q, p) of eq. 2 of one cluster q against M other models.

    Args:
        own_errors: (n,) reconstruction errors of q's samples under q's own model.
        other_errors: (n,) or (n, M) errors of the same samples under the other models.
        alpha: the percentile, in [0, 100].

    Returns:
        (M,) scores P_α(min-max scaled |own − other|); a scalar input gives shape (1,).
        A column whose differences are all equal (relative 1e-9; n = 1 included) scores 0.
    """
    owner = "association_scores"
    alpha = check_float(alpha, name="alpha", owner=owner, low=0.0, high=100.0)
    own = _check_errors(own_errors, "own_errors")
    other = _check_errors(other_errors, "other_errors")
    if other.ndim == 1:
        other = other[:, None]
    if own.ndim != 1 or other.ndim != 2 or other.shape[0] != own.shape[0] or own.shape[0] == 0:
        raise ValueError(
            "own_errors must have shape (n,) with n >= 1 and other_errors shape (n,) or (n, M); "
            f"got {own.shape} and {other.shape}."
        )
    d = np.abs(own[:, None] - other)
    lo = d.min(axis=0)
    hi = d.max(axis=0)
    # Differences equal up to rounding (relative 1e-9) count as constant.
    varies = (hi - lo) > 1e-9 * hi
    scaled = (d - lo) / np.where(varies, hi - lo, 1.0)
    out: FloatArray = np.percentile(scaled, alpha, axis=0)
    return np.where(varies, out, 0.0)


def symmetric_edges(
    scores: Mapping[tuple[ClusterRef, ClusterRef], float],
    *,
    theta: float = 0.2,
    one_per_participant: bool = True,
) -> list[tuple[ClusterRef, ClusterRef]]:
    """Association edges: s(a→b) ≤ θ and s(b→a) ≤ θ for clusters of different participants.

    ``scores[(a, b)]`` is a's score against b's model. A pair with only one direction scored
    is not associated. With ``one_per_participant`` (default) a cluster keeps at most one
    partner per other participant: the edge (a, b) survives only if b is a's best partner
    among b's participant's clusters and a is b's best among a's participant's, by
    max(s(a→b), s(b→a)) (ties: the lower reference). The authors' code likewise keeps one
    match per cluster and other client (the first found); the mutual best does not depend on
    the order of the clusters. Returns sorted (a, b) pairs with a < b.
    """
    theta = check_float(theta, name="theta", owner="symmetric_edges", low=0.0)
    candidates: dict[tuple[ClusterRef, ClusterRef], float] = {}
    for (a, b), s in scores.items():
        if not a < b or a[0] == b[0]:
            continue
        back = scores.get((b, a))
        if back is not None and s <= theta and back <= theta:
            candidates[(a, b)] = max(s, back)
    if not one_per_participant:
        return sorted(candidates)
    best: dict[tuple[ClusterRef, int], tuple[float, ClusterRef]] = {}
    for (a, b), w in candidates.items():
        for me, other in ((a, b), (b, a)):
            key = (me, other[0])
            if key not in best or (w, other) < best[key]:
                best[key] = (w, other)
    return sorted(
        (a, b)
        for (a, b) in candidates
        if best[(a, b[0])][1] == b and best[(b, a[0])][1] == a
    )


def find_groups(
    clusters: Sequence[ClusterRef], edges: Sequence[tuple[ClusterRef, ClusterRef]]
) -> Grouping:
    """Connected components of the association graph: groups (>= 2 clusters) and isolated."""
    nodes = sorted(set(clusters))
    if len(nodes) != len(clusters):
        raise ValueError("clusters must be distinct (participant, cluster) pairs.")
    index = {c: i for i, c in enumerate(nodes)}
    for a, b in edges:
        if a not in index or b not in index:
            raise ValueError("every edge must join two of the given clusters.")
    n = len(nodes)
    if n == 0:
        return Grouping((), ())
    rows = np.array([index[a] for a, _ in edges], dtype=np.intp)
    cols = np.array([index[b] for _, b in edges], dtype=np.intp)
    graph = coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    members: dict[int, list[ClusterRef]] = {}
    for c, lab in zip(nodes, labels, strict=True):
        members.setdefault(int(lab), []).append(c)
    groups = sorted(tuple(m) for m in members.values() if len(m) >= 2)
    isolated = sorted(m[0] for m in members.values() if len(m) == 1)
    return Grouping(tuple(groups), tuple(isolated))


def greedy_refinement(errors: ArrayLike, k: int, *, min_size: int = 1) -> NDArray[np.intp]:
    """Algorithm 2: reassign samples greedily to the models that best reconstruct most of them.

    Repeat k times: among the models not yet picked, find for every unassigned sample its
    best (lowest-error) model; pick the model that is best for the most samples (ties: lowest
    index) and assign it those samples. Picking stops early when no sample is left or when the
    winner would get fewer than ``min_size`` samples (at least one model is always picked).
    Samples still unassigned go to their best picked model.

    Args:
        errors: (n_samples, n_models) reconstruction errors.
        k: the number of picks, K_i (capped at n_models).
        min_size: the fewest samples a picked model must win.

    Returns:
        (n_samples,) the index of the model each sample is assigned to; the distinct values
        are the picked models.
    """
    owner = "greedy_refinement"
    E = check_data(errors, name="errors")
    k = check_int(k, name="k", owner=owner, low=1)
    min_size = check_int(min_size, name="min_size", owner=owner, low=1)
    n, m = E.shape
    assigned = np.full(n, -1, dtype=np.intp)
    available = np.ones(m, dtype=bool)
    picked: list[int] = []
    for _ in range(min(k, m)):
        free = assigned < 0
        if not free.any():
            break
        masked = np.where(available[None, :], E[free], np.inf)
        best = np.argmin(masked, axis=1)
        counts = np.bincount(best, minlength=m)
        winner = int(np.argmax(counts))
        if counts[winner] < min_size and picked:
            break
        rows = np.flatnonzero(free)[best == winner]
        assigned[rows] = winner
        available[winner] = False
        picked.append(winner)
    rest = assigned < 0
    if rest.any():
        cols = np.array(picked, dtype=np.intp)
        assigned[rest] = cols[np.argmin(E[rest][:, cols], axis=1)]
    return assigned


def assignment_agreement(previous: ArrayLike, current: ArrayLike) -> float:
    """ACC between a client's consecutive assignments (Hungarian; label values arbitrary)."""
    return clustering_accuracy(previous, current)


def client_frozen(agreement: float, *, tau: float = 0.8) -> bool:
    """A client freezes when the agreement of its consecutive assignments is ≥ τ."""
    tau = check_float(tau, name="tau", owner="client_frozen", low=0.0, high=1.0)
    return agreement >= tau


def counts_stable(
    history: Sequence[tuple[int, int]], *, window: int = 3, tolerance: float = 0.1
) -> bool:
    """True when, over the last ``window`` iterations, (n_groups, n_isolated) each varied by at
    most ``tolerance`` relative to their largest value: max − min ≤ tolerance · max(1, max).

    With small counts this means "unchanged". Fewer than ``window`` iterations: False.
    """
    owner = "counts_stable"
    window = check_int(window, name="window", owner=owner, low=1)
    tolerance = check_float(tolerance, name="tolerance", owner=owner, low=0.0)
    if len(history) < window:
        return False
    recent = np.asarray(history[-window:], dtype=np.float64)
    hi = recent.max(axis=0)
    lo = recent.min(axis=0)
    return bool(np.all(hi - lo <= tolerance * np.maximum(hi, 1.0)))


def dirty_labels(
    labels: ArrayLike, dirtiness: float, *, seed: int | np.random.Generator | None = None
) -> NDArray[np.intp]:
    """The paper's simulated initial clustering: relabel to 0..K−1, then replace each label with
    probability d by a different local label drawn uniformly (K = 1: nothing to swap with)."""
    owner = "dirty_labels"
    d = check_float(dirtiness, name="dirtiness", owner=owner, low=0.0, high=1.0)
    y = np.asarray(labels)
    if y.ndim != 1 or y.shape[0] == 0:
        raise ValueError(f"labels must be a non-empty 1-D array; got shape {y.shape}.")
    _, clean = np.unique(y, return_inverse=True)
    clean = clean.astype(np.intp)
    k = int(clean.max()) + 1
    if k == 1 or d == 0.0:
        return clean
    rng = rng_from(seed)
    flip = rng.random(clean.shape[0]) < d
    shift = rng.integers(1, k, size=clean.shape[0])
    out: NDArray[np.intp] = np.where(flip, (clean + shift) % k, clean).astype(np.intp)
    return out


def participant_fedavg_contribution(
    params: ArrayLike, n: int
) -> dict[str, NDArray[np.float64]]:
    """One member's FedAvg contribution: {"weighted_params": n·θ, "n": [n]} (sum-type)."""
    n = check_int(n, name="n", owner="participant_fedavg_contribution", low=1)
    theta = np.asarray(params, dtype=np.float64)
    if theta.ndim != 1 or not np.isfinite(theta).all():
        raise ProtocolError("params must be a finite flat vector.")
    return {"weighted_params": n * theta, "n": np.array([float(n)])}


def combine_fedavg(
    sums: Mapping[str, ArrayLike], spec: AutoencoderSpec
) -> NDArray[np.float32]:
    """FedAvg from the sums of contributions: θ_g = Σ_l n_l θ_l / Σ_l n_l, as float32."""
    if "weighted_params" not in sums or "n" not in sums:
        raise ProtocolError("FedAvg sums must hold 'weighted_params' and 'n'.")
    n = np.asarray(sums["n"], dtype=np.float64).reshape(-1)
    if n.shape != (1,) or not np.isfinite(n[0]) or n[0] <= 0:
        raise ProtocolError("FedAvg sum 'n' must be one positive count.")
    weighted = np.asarray(sums["weighted_params"], dtype=np.float64)
    theta = (weighted / n[0]).astype(np.float32)
    return spec.check_params(theta, name="FedAvg model")


def count_wrong_associations(grouping: Grouping, majority: Mapping[ClusterRef, int]) -> int:
    """Evaluation only: grouped clusters whose majority true class differs from their group's
    most common majority class, summed over groups (0 = every group is one true class)."""
    wrong = 0
    for members in grouping.groups:
        classes = [majority[c] for c in members]
        values, counts = np.unique(classes, return_counts=True)
        del values
        wrong += len(classes) - int(counts.max())
    return wrong
