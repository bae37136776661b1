"""A FedCRef participant (Nardi, Valerio & Passarella): its rows, local clusters and models.

:class:`FedCRefLocal` keeps the rows X (in [0, 1]), the current local assignment and one
autoencoder per local cluster. Through ``participant.fedcref_tasks`` it answers the driver's
tasks (``coordinator.fedcref``) with models as flat float32 vectors, association scores (eq.
2), FedAvg contributions as sums (n·θ and n) and, after refinement (Algorithm 2), the agreement
of its consecutive assignments. Rows, labels and per-sample errors never leave it. Initial
clustering (``initial``): ``"kmeans"`` (k-means, 10 restarts, on a 32-d autoencoder code; K_i =
``k`` or by silhouette over 2..``k_max``), ``"labels"`` or ``"dirty"``
(``protocol.maths.fedcref.dirty_labels``). Every local model starts from the same weights
(:data:`COMMON_INIT_SEED`); refinement drops clusters under ``min_cluster_size`` rows.
``y_true`` serves only the simulator's evaluation and the dirty clustering; nothing derived
from it reaches the driver. The local-only baseline (:meth:`FedCRefLocal.refine_alone`,
:func:`local_only_baseline`) runs the same local steps with no federation.

Design notes: ``docs/fedcref.md`` (§ A participant).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.core.validation import FloatArray, check_data, check_float, check_int, rng_from
from fedclust.participant.deep import autoencoder as ae
from fedclust.participant.deep.device import resolve_device
from fedclust.protocol.maths.fedcref import (
    AutoencoderSpec,
    ClusterRef,
    FedCRefEvaluation,
    Grouping,
    assignment_agreement,
    association_scores,
    client_frozen,
    count_wrong_associations,
    dirty_labels,
    greedy_refinement,
    participant_fedavg_contribution,
)
from fedclust.protocol.maths.metrics import clustering_accuracy

__all__ = ["COMMON_INIT_SEED", "FedCRefLocal", "label_evaluator", "local_only_baseline"]

InitialClustering = Literal["kmeans", "labels", "dirty"]
_SEED_BOUND = 2**31 - 1
#: Seed of the initial weights every local model of every participant starts from. FedAvg
#: averages parameters element-wise, which is only meaningful for networks trained from a
#: common starting point; independently initialised networks average to a model that
#: reconstructs no better than an untrained one (hidden units are not aligned).
COMMON_INIT_SEED = 0
_SILHOUETTE_SAMPLE = 2000


class FedCRefLocal:
    """One organisation's rows for FedCRef; only models, scores and sums leave.

    Args:
        X: the rows, shape (n_samples, n_features), values in [0, 1] (flattened images scaled
            by their maximum, or min-max scaled features).
        name: a label for reports.
        initial: how the initial local clustering is made (see the module docstring).
        k: K_i for ``"kmeans"``; None chooses it by silhouette over 2..``k_max``.
        labels: the initial assignment for ``"labels"``.
        y_true: true classes (simulation only): ``"dirty"`` and :meth:`fedcref_evaluation`.
        dirtiness: probability d of swapping a label in the ``"dirty"`` clustering.
        config: local training settings (authors' defaults).
        min_cluster_size: the fewest rows a refined cluster keeps.
        device: where the autoencoders train and score (``participant.deep.device``: auto,
            cpu, cuda[:N]); ValueError when a GPU is named and torch sees none.
    """

    def __init__(
        self,
        X: ArrayLike,
        *,
        name: str,
        initial: InitialClustering = "kmeans",
        k: int | None = None,
        k_max: int = 6,
        labels: ArrayLike | None = None,
        y_true: ArrayLike | None = None,
        dirtiness: float = 0.0,
        config: ae.TrainConfig | None = None,
        min_cluster_size: int = 2,
        device: str = "auto",
    ) -> None:
        owner = "FedCRefLocal"
        self.name = name
        self.device = resolve_device(device, where=f"device of participant {name!r}")
        self._X = check_data(X, name=f"data of participant {name!r}", min_samples=2)
        if self._X.min() < 0.0 or self._X.max() > 1.0:
            raise ValueError(
                f"data of participant {name!r} must be scaled to [0, 1] (the autoencoder has a "
                "sigmoid output); divide images by their maximum value or min-max scale."
            )
        n = self._X.shape[0]
        if initial not in ("kmeans", "labels", "dirty"):
            raise ValueError(
                f"The 'initial' parameter of {owner} must be 'kmeans', 'labels' or 'dirty'. "
                f"Got {initial!r} instead."
            )
        self._initial: InitialClustering = initial
        self._k = None if k is None else check_int(k, name="k", owner=owner, low=1, high=n)
        self._k_max = check_int(k_max, name="k_max", owner=owner, low=2)
        self._dirtiness = check_float(dirtiness, name="dirtiness", owner=owner, low=0.0, high=1.0)
        self._given = None if labels is None else self._check_labels(labels, "labels")
        self._y_true = None if y_true is None else self._check_labels(y_true, "y_true")
        if initial == "labels" and self._given is None:
            raise ValueError("initial='labels' needs the labels argument.")
        if initial == "dirty" and self._y_true is None:
            raise ValueError("initial='dirty' needs y_true (it simulates a noisy clustering).")
        self._config = config if config is not None else ae.TrainConfig()
        self._min_size = check_int(min_cluster_size, name="min_cluster_size", owner=owner, low=1)
        self._spec: AutoencoderSpec | None = None
        self._labels: NDArray[np.intp] = np.zeros(n, dtype=np.intp)
        self._models: list[NDArray[np.float32]] = []
        self._stale = True

    def _check_labels(self, labels: ArrayLike, name: str) -> NDArray[np.generic]:
        arr = np.asarray(labels)
        if arr.shape != (self._X.shape[0],):
            raise ValueError(
                f"{name} must have shape ({self._X.shape[0]},), one per row; got {arr.shape}."
            )
        return arr

    # -- public, non-secret facts -------------------------------------------------------
    @property
    def n_features(self) -> int:
        """The row width, a public part of the federation's schema."""
        return int(self._X.shape[1])

    @property
    def n_clusters(self) -> int:
        """The current K_i."""
        return len(self._models)

    @property
    def labels(self) -> NDArray[np.intp]:
        """The current local assignment (stays with the participant; a copy)."""
        return self._labels.copy()

    @property
    def needs_training(self) -> bool:
        """True when the assignment changed since the local models were last trained."""
        return self._stale

    def restore(
        self,
        spec: AutoencoderSpec,
        labels: ArrayLike,
        models: Sequence[NDArray[np.float32]],
        *,
        stale: bool,
    ) -> None:
        """Reinstate a saved state (e.g. after an agent restart): the architecture, the
        assignment (values 0..K−1, every cluster non-empty) and one model per cluster."""
        if spec.input_dim != self.n_features:
            raise ValueError(
                f"participant {self.name!r} has rows of width {self.n_features} but the saved "
                f"{spec.describe()} expects width {spec.input_dim}."
            )
        lab = np.asarray(labels)
        k = len(models)
        if (
            lab.shape != (self._X.shape[0],)
            or not np.issubdtype(lab.dtype, np.integer)
            or k == 0
            or np.unique(lab).shape[0] != k
            or lab.min() != 0
            or lab.max() != k - 1
        ):
            raise ProtocolError(
                f"participant {self.name!r}: the saved assignment must give every row one of "
                f"0..K-1 with K = {k} saved models, every cluster non-empty."
            )
        self._spec = spec
        self._labels = lab.astype(np.intp)
        self._models = [
            spec.check_params(m, name=f"saved model {q}").copy() for q, m in enumerate(models)
        ]
        self._stale = bool(stale)

    # -- driver requests -----------------------------------------------------------------
    def fedcref_init(self, spec: AutoencoderSpec, *, seed: int) -> int:
        """Make the initial local clustering and train one model per cluster; return K_i."""
        if spec.input_dim != self.n_features:
            raise ValueError(
                f"participant {self.name!r} has rows of width {self.n_features} but the "
                f"federation's {spec.describe()} expects width {spec.input_dim} (wrong image "
                "size?)."
            )
        self._spec = spec
        rng = rng_from(seed)
        if self._initial == "labels":
            assert self._given is not None
            self._labels = np.unique(self._given, return_inverse=True)[1].astype(np.intp)
        elif self._initial == "dirty":
            assert self._y_true is not None
            self._labels = dirty_labels(self._y_true, self._dirtiness, seed=rng)
        else:
            self._labels = self._kmeans_labels(rng)
        _, inv = np.unique(self._labels, return_inverse=True)
        self._labels = inv.astype(np.intp)
        k = int(self._labels.max()) + 1
        # One common start for every local model of the federation (see COMMON_INIT_SEED):
        # the group start of FedAvg is the size-weighted mean of its members' local models.
        common = ae.init_params(spec, seed=COMMON_INIT_SEED)
        self._models = [common.copy() for _ in range(k)]
        self._stale = True
        self.fedcref_train(seed=int(rng.integers(_SEED_BOUND)))
        return k

    def _kmeans_labels(self, rng: np.random.Generator) -> NDArray[np.intp]:
        spec = self._require_spec()
        params = ae.train(
            spec, ae.init_params(spec, seed=rng), self._X, config=self._config, seed=rng,
            device=self.device,
        )
        Z = ae.embed(spec, params, self._X, self.device)
        n = Z.shape[0]
        if self._k is not None:
            ks = [self._k]
        else:
            ks = list(range(2, min(self._k_max, n - 1) + 1))
            if not ks:
                return np.zeros(n, dtype=np.intp)
        best: tuple[float, NDArray[np.intp]] | None = None
        for k in ks:
            km = KMeans(n_clusters=k, n_init=10, random_state=int(rng.integers(_SEED_BOUND)))
            lab = np.asarray(km.fit_predict(Z), dtype=np.intp)
            if len(ks) == 1:
                return lab
            if np.unique(lab).shape[0] < 2:
                continue
            score = float(
                silhouette_score(
                    Z,
                    lab,
                    sample_size=min(n, _SILHOUETTE_SAMPLE),
                    random_state=int(rng.integers(_SEED_BOUND)),
                )
            )
            if best is None or score > best[0]:
                best = (score, lab)
        if best is None:
            return np.zeros(n, dtype=np.intp)
        _, inv = np.unique(best[1], return_inverse=True)
        return inv.astype(np.intp)

    def _require_spec(self) -> AutoencoderSpec:
        if self._spec is None:
            raise ProtocolError(f"participant {self.name!r}: fedcref_init was not called.")
        return self._spec

    def fedcref_train(self, *, seed: int) -> None:
        """Train (warm-started) one model per local cluster if the assignment changed since the
        last training; a frozen participant keeps its models."""
        spec = self._require_spec()
        if not self._stale:
            return
        rng = rng_from(seed)
        self._models = [
            ae.train(spec, m, self._X[self._labels == q], config=self._config, seed=rng,
                     device=self.device)
            for q, m in enumerate(self._models)
        ]
        self._stale = False

    def fedcref_models(self) -> list[NDArray[np.float32]]:
        """The local models, one flat float32 vector per local cluster."""
        self._require_spec()
        return [m.copy() for m in self._models]

    def fedcref_scores(
        self, models: Sequence[NDArray[np.float32]], *, alpha: float = 75.0
    ) -> FloatArray:
        """(K_i, M) association scores (eq. 2) of every local cluster against every model."""
        spec = self._require_spec()
        checked = [spec.check_params(m, name=f"model {j}") for j, m in enumerate(models)]
        k = len(self._models)
        out = np.zeros((k, len(checked)), dtype=np.float64)
        if not checked:
            return out
        own = self._errors(self._models)
        other = self._errors(checked)
        for q in range(k):
            rows = self._labels == q
            out[q] = association_scores(own[rows, q], other[rows], alpha=alpha)
        return out

    def _errors(self, models: Sequence[NDArray[np.float32]]) -> FloatArray:
        spec = self._require_spec()
        E = np.empty((self._X.shape[0], len(models)), dtype=np.float64)
        for j, m in enumerate(models):
            E[:, j] = ae.reconstruction_errors(spec, m, self._X, self.device)
        return E

    def fedcref_fedavg_step(
        self,
        model: NDArray[np.float32] | None,
        clusters: Sequence[int],
        *,
        epochs: int,
        seed: int,
    ) -> dict[str, NDArray[np.float64]]:
        """This participant's FedAvg contribution for one group: {"weighted_params": n·θ,
        "n": [n]} with n the rows of its clusters in the group.

        ``model`` None (the group's start): Σ_q n_q θ_q over its current local models of those
        clusters. Otherwise θ is ``model`` trained ``epochs`` epochs on the union of the rows.
        """
        spec = self._require_spec()
        top = len(self._models) - 1
        ids = sorted(
            {check_int(c, name="clusters", owner="fedcref_fedavg_step", low=0, high=top)
             for c in clusters}
        )
        if not ids:
            raise ProtocolError("fedcref_fedavg_step needs at least one cluster.")
        if model is None:
            sizes = [int(np.count_nonzero(self._labels == q)) for q in ids]
            weighted = sum(
                (s * self._models[q].astype(np.float64) for s, q in zip(sizes, ids, strict=True)),
                start=np.zeros(spec.n_params),
            )
            return {"weighted_params": weighted, "n": np.array([float(sum(sizes))])}
        start = spec.check_params(model, name="group model")
        rows = np.isin(self._labels, ids)
        theta = ae.train(
            spec, start, self._X[rows], config=self._config, epochs=epochs, seed=seed,
            device=self.device,
        )
        return participant_fedavg_contribution(theta, int(np.count_nonzero(rows)))

    def fedcref_refine(self, group_models: Sequence[NDArray[np.float32]], *, seed: int) -> float:
        """Algorithm 2 over its local models and the given federated models; return the
        agreement (Hungarian ACC) of the new assignment with the previous one.

        The new clusters start from the models that won them; they are retrained at the next
        :meth:`fedcref_train`. ``seed`` is unused (the step is deterministic) and kept for a
        uniform request shape.
        """
        spec = self._require_spec()
        del seed
        candidates = [*self._models, *(spec.check_params(m) for m in group_models)]
        E = self._errors(candidates)
        picked = greedy_refinement(E, len(self._models), min_size=self._min_size)
        kept, new_labels = np.unique(picked, return_inverse=True)
        agreement = assignment_agreement(self._labels, new_labels)
        self._labels = new_labels.astype(np.intp)
        self._models = [candidates[int(j)].copy() for j in kept]
        self._stale = True
        return agreement

    # -- the local-only baseline -----------------------------------------------------
    def refine_alone(self, *, tau: float = 0.8, max_iterations: int = 10, seed: int) -> list[float]:
        """FedCRef's local steps with no federation (the local-only baseline).

        Each iteration retrains the local models on their clusters (:meth:`fedcref_train`)
        and reassigns the rows by Algorithm 2 over the local models alone
        (:meth:`fedcref_refine` with no federated model), until consecutive assignments agree
        >= ``tau`` (``client_frozen``, as a FedCRef client freezes) or after
        ``max_iterations``. No association, no groups, no FedAvg: nothing leaves. Call after
        :meth:`fedcref_init`; returns the agreement of every iteration.
        """
        owner = "refine_alone"
        tau = check_float(tau, name="tau", owner=owner, low=0.0, high=1.0)
        max_iterations = check_int(max_iterations, name="max_iterations", owner=owner, low=1)
        self._require_spec()
        rng = rng_from(seed)
        agreements: list[float] = []
        for _ in range(max_iterations):
            self.fedcref_train(seed=int(rng.integers(_SEED_BOUND)))
            agreements.append(self.fedcref_refine([], seed=0))
            if client_frozen(agreements[-1], tau=tau):
                break
        return agreements

    # -- simulator only ---------------------------------------------------------------
    def fedcref_evaluation(self) -> tuple[float, list[int]]:
        """Simulator evaluation: (local ACC against y_true, majority true class index per
        local cluster). Refused without ``y_true``; never called by the driver."""
        if self._y_true is None:
            raise RefusedError(f"participant {self.name!r} has no true labels to evaluate.")
        classes, y = np.unique(self._y_true, return_inverse=True)
        del classes
        acc = clustering_accuracy(y, self._labels)
        # Clusters are never empty (refinement keeps only clusters that won rows).
        majority = [
            int(np.bincount(y[self._labels == q]).argmax()) for q in range(len(self._models))
        ]
        return acc, majority

    def true_classes(self) -> NDArray[np.generic]:
        """Simulator only: the distinct true class values (to map majority indices back)."""
        if self._y_true is None:
            raise RefusedError(f"participant {self.name!r} has no true labels.")
        return np.unique(self._y_true)


def label_evaluator(
    participants: Sequence[FedCRefLocal],
) -> Callable[[Grouping | None], FedCRefEvaluation]:
    """The simulator's evaluation hook for ``run_fedcref``: mean local ACC over participants
    and, given a grouping, the wrong associations (``count_wrong_associations``) by the
    majority true class of each cluster. Participant indices are positions in
    ``participants`` (the same sequence the driver gets)."""

    def evaluate(grouping: Grouping | None) -> FedCRefEvaluation:
        accs: list[float] = []
        majority: dict[ClusterRef, int] = {}
        codes: dict[object, int] = {}
        for i, p in enumerate(participants):
            acc, maj = p.fedcref_evaluation()
            accs.append(acc)
            classes = p.true_classes()
            for q, m in enumerate(maj):
                value = classes[m].item()
                majority[(i, q)] = codes.setdefault(value, len(codes))
        wrong = None if grouping is None else count_wrong_associations(grouping, majority)
        return FedCRefEvaluation(float(np.mean(accs)), wrong)

    return evaluate


def local_only_baseline(
    participants: Sequence[FedCRefLocal],
    *,
    tau: float = 0.8,
    max_iterations: int = 10,
    seed: int | None = None,
) -> FedCRefEvaluation:
    """The local-only baseline of FedCRef: every participant (after ``fedcref_init``) runs
    :meth:`FedCRefLocal.refine_alone` on its own rows, one after another, with a seed drawn
    from ``seed`` by its position; then the mean local ACC against ``y_true``, the metric of
    :func:`label_evaluator` (``wrong_associations`` None: there is no association)."""
    seeds = rng_from(seed).integers(_SEED_BOUND, size=len(participants))
    for p, s in zip(participants, seeds, strict=True):
        p.refine_alone(tau=tau, max_iterations=max_iterations, seed=int(s))
    return label_evaluator(participants)(None)
