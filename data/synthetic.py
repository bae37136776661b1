"""Built-in synthetic setups of the papers: each returns one (X, labels) pair per participant."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

# -- Stallmann & Wilbik (2022): the motivational example (§3.2.1) ---------------------------

MOTIVATIONAL_CENTERS = np.array(
    [(0.2, 0.2), (0.2, 0.8), (0.8, 0.2), (0.8, 0.8), (0.5, 0.5)], dtype=np.float64
)
MOTIVATIONAL_SPREADS = np.array([0.1, 0.1, 0.1, 0.1, 0.03], dtype=np.float64)
# Points of each true cluster (columns) held by each client (rows).
MOTIVATIONAL_COUNTS = np.array(
    [
        [150, 150, 0, 0, 12],  # client 0: the left corners
        [0, 0, 150, 150, 12],  # client 1: the right corners
        [0, 150, 0, 150, 12],  # client 2: the top corners
    ],
    dtype=np.intp,
)


def motivational(
    seed: int | np.random.Generator | None = None,
) -> list[tuple[NDArray[np.float64], NDArray[np.intp]]]:
    """Reconstruction of the motivational example of Stallmann & Wilbik (2022, §3.2.1).

    Paper: M. Stallmann, A. Wilbik, "On a Framework for Federated Cluster Analysis",
    Appl. Sci. 12(20) 10455 (2022). Three clients, data in [0, 1]², five true clusters, one of
    which (the small cluster at (0.5, 0.5)) is only visible when the clients' data are pooled.
    Reconstructed, not copied (tuned to the paper's Table 1 central values): four corner
    clusters at (0.2|0.8, 0.2|0.8), std 0.1, and a middle one at (0.5, 0.5), std 0.03
    (``MOTIVATIONAL_*``); each client holds two corners of 150 points and 12 middle points;
    isotropic Gaussians truncated to [0, 1]² (points outside are redrawn).

    Returns:
        Three pairs (X_l of shape (n_l, 2), labels_l of shape (n_l,)); labels index
        ``MOTIVATIONAL_CENTERS`` (4 is the middle cluster); 312 rows per client.

    Design notes: ``docs/fcm.md`` (§ The motivational example: what was kept and tuned).
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    clients: list[tuple[NDArray[np.float64], NDArray[np.intp]]] = []
    for counts in MOTIVATIONAL_COUNTS:
        parts: list[NDArray[np.float64]] = []
        labels: list[NDArray[np.intp]] = []
        for cluster, n in enumerate(counts):
            if n == 0:
                continue
            center = MOTIVATIONAL_CENTERS[cluster]
            spread = float(MOTIVATIONAL_SPREADS[cluster])
            X = center + spread * rng.standard_normal((int(n), 2))
            outside = ((X < 0.0) | (X > 1.0)).any(axis=1)
            while outside.any():
                X[outside] = center + spread * rng.standard_normal((int(outside.sum()), 2))
                outside = ((X < 0.0) | (X > 1.0)).any(axis=1)
            parts.append(X)
            labels.append(np.full(int(n), cluster, dtype=np.intp))
        clients.append((np.vstack(parts), np.concatenate(labels)))
    return clients


# -- Garst & Reinders (2023): the "garst-grid" synthetic experiment -------------------------

GARST_GRID_CENTERS = np.array(
    [(x, y) for x in (-7.5, -2.5, 2.5, 7.5) for y in (-7.5, -2.5, 2.5, 7.5)], dtype=np.float64
)


def garst_grid(
    beta: float,
    n_clients: int,
    seed: int | np.random.Generator | None = None,
    *,
    points_per_cluster: int = 50,
    noise: float = 1.0,
) -> list[tuple[NDArray[np.float64], NDArray[np.intp]]]:
    """The synthetic federation of Garst & Reinders (2023), one (X, labels) per client.

    Data: 16 centers 5 apart on a 4x4 grid ({-7.5, -2.5, 2.5, 7.5}²), ``points_per_cluster``
    points N(center, noise²·I) each (50 and 1 in the paper). Clients are placed uniformly in
    the field [-10, 10]² (as in the authors' notebook). Client l "observes" a point
    independently with probability P_l = 1 - exp(-β/d_l), d_l the Euclidean distance from the
    point to client l. A point observed by nobody goes to the nearest client; a point
    observed by several goes to one of them chosen uniformly at random. So β → 0 gives a
    spatial, strongly non-IID split (nearest client) and large β an almost IID one; the paper
    uses β ∈ {0.1, 1, 10} and 5 clients.

    Deviation: the authors' notebook gives a multiply-observed point to the FARTHEST observer
    (with an indexing slip that favours low client indices); the uniform choice keeps the
    intended meaning of β. A client can receive few (in principle zero) points.

    Returns:
        ``n_clients`` pairs (X_l of shape (n_l, 2), labels_l of shape (n_l,)); labels are the
        index of the generating grid center.
    """
    beta = float(beta)
    if not np.isfinite(beta) or beta <= 0.0:
        raise ValueError(f"The 'beta' parameter of garst_grid must be a float > 0. Got {beta!r}.")
    if not isinstance(n_clients, (int, np.integer)) or isinstance(n_clients, bool) or n_clients < 1:
        raise ValueError(
            f"The 'n_clients' parameter of garst_grid must be an int >= 1. Got {n_clients!r}."
        )
    rng = np.random.default_rng(seed) if not isinstance(seed, np.random.Generator) else seed
    n_clusters = GARST_GRID_CENTERS.shape[0]
    labels = np.repeat(np.arange(n_clusters), points_per_cluster)
    X = GARST_GRID_CENTERS[labels] + noise * rng.standard_normal((labels.size, 2))
    clients = rng.uniform(-10.0, 10.0, size=(int(n_clients), 2))
    d = np.sqrt(((X[:, None, :] - clients[None, :, :]) ** 2).sum(axis=2))
    d = np.maximum(d, np.finfo(np.float64).tiny)
    observed = rng.random(d.shape) < -np.expm1(-beta / d)
    # Uniform choice among observers: the largest random key among the observing clients.
    keys = np.where(observed, rng.random(d.shape), -1.0)
    owner = np.where(observed.any(axis=1), keys.argmax(axis=1), d.argmin(axis=1))
    return [(X[owner == c], labels[owner == c]) for c in range(int(n_clients))]
