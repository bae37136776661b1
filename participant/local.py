"""The participant agent's computations over its own rows.

A :class:`LocalParticipant` holds one organisation's data and answers a coordinator's
requests by calling the pure participant-side functions of ``protocol``. It checks its
:class:`~participant.policy.Policy` before computing anything. The in-process simulator
uses it directly; the network agent wraps the same object behind HTTP.

The rows are checked once, when the participant is built (:class:`protocol.maths.rows.Rows`, with
their squared norms), and shared, never copied: every statistic reads them block by block
(``protocol.maths.rows``), so a job's extra memory is a constant. A standardisation replaces them
by one new array.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedclust.core.errors import RefusedError
from fedclust.core.validation import FloatArray, check_centers
from fedclust.participant.model_tasks import MODEL_TASKS
from fedclust.participant.policy import Policy
from fedclust.protocol import algorithms
from fedclust.protocol.maths import (
    center_kmeans,
    choose_k,
    federated_kmeans,
    fedfcm,
    kfed,
    standardise,
)
from fedclust.protocol.maths._fuzzy import nearest
from fedclust.protocol.maths.declaration import Declaration
from fedclust.protocol.maths.rows import Rows, RowSource, as_rows, as_source, largest_magnitude
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.messages import JobCreate


class LocalParticipant:
    """One organisation's rows, kept local; only the statistics below ever leave.

    Args:
        X: the participant's data, shape (n_samples, n_features); or :class:`Rows` already
            checked (shared as they are: several jobs can hold the same rows); or a
            :class:`RowSource` read in chunks (``fedclust.data.stream``): the sums stream it,
            the tasks needing every row at once (local FCM, k-means seeding, k-FED, local K)
            read it whole for the task.
        name: a label for reports ("client-0", "hospital-a").
        policy: the local rules; the default allows every algorithm with the papers' rules.
        count_sink: how N_l reaches the counting service, ``sink(name, N_l)``; the agent
            posts it over HTTP, the simulator hands it to an in-process service.

    Raises:
        ValueError: ``X`` does not satisfy a bound the policy configures
            (:meth:`Policy.declare`).
    """

    def __init__(
        self,
        X: ArrayLike | RowSource,
        *,
        name: str,
        policy: Policy | None = None,
        count_sink: Callable[[str, int], None] | None = None,
    ) -> None:
        self._rows = as_source(X, name=f"data of participant {name!r}")
        self.name = name
        self.policy = policy if policy is not None else Policy()
        #: The public bounds of the raw rows (``protocol.maths.declaration``), fixed at load time:
        #: every size check below is made against them, never against the rows.
        self.declaration: Declaration = self.policy.declare_extent(
            self._rows.n_rows, largest_magnitude(self._rows)
        )
        self._count_sink = count_sink
        self._held: tuple[center_kmeans.LocalPoints, float] | None = None
        #: The model-based tasks' handler (``participant.model_tasks.ModelTasks``), set by
        #: the agent when the data has labels; :meth:`answer` routes those tasks to it.
        self.model_tasks: Any = None

    @property
    def rows(self) -> RowSource:
        """The (possibly standardised) rows, checked once; shared, never to be modified."""
        return self._rows

    def _in_memory(self) -> Rows:
        return self._rows.in_memory()

    @property
    def n_features(self) -> int:
        """The number of columns, a public part of the federation's schema."""
        return self._rows.n_features

    def _centers(self, centers: ArrayLike) -> FloatArray:
        return check_centers(centers, n_features=self.n_features)

    def declare(self, terms: JobCreate) -> Declaration:
        """The declared public bounds, for the job of ``terms`` (this participant on its
        roster; the agent checks the rest of the terms, ``participant.terms``)."""
        if self.name not in terms.participants:
            raise RefusedError("this participant is not on the job's roster: refused.")
        return self.declaration

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply to one task (its job's policy and terms already checked); a refusal
        raises RefusedError (:func:`reply_to`)."""
        return reply_to(self, spec)

    # -- counting service only ------------------------------------------------------------
    def report_count(self) -> None:
        """Send N_l to the counting service; the coordinator gets nothing back."""
        if self._count_sink is None:
            raise RefusedError("this participant has no counting service to report N_l to.")
        self._count_sink(self.name, self._rows.n_rows)

    # -- federated standardisation ----------------------------------------------------------
    def apply_standardisation(self, mean: ArrayLike, scale: ArrayLike) -> None:
        """Replace the local rows by their z-scores under the federation's mean and scale (a new
        array: the rows this participant was built with, maybe shared, are left as they are)."""
        self._rows = as_rows(standardise.apply(self._in_memory().X, mean, scale))

    # -- Stallmann & Wilbik: FedFCM ---------------------------------------------------------
    def local_fcm(
        self, centers: ArrayLike, *, m: float, tol: float, max_iter: int
    ) -> fedfcm.LocalCenters:
        """Local FCM started from the global centers, run to local convergence (§2.2.1)."""
        return fedfcm.participant_local_fcm(
            self._in_memory(), self._centers(centers), m=m, tol=tol, max_iter=max_iter
        )

    # -- the centers-based algorithms: local centers stay here ------------------------------
    def hold_local_fcm(self, centers: ArrayLike, *, m: float, tol: float, max_iter: int) -> None:
        """Local FCM as :meth:`local_fcm`, but keep the centers (unit weights) and J_m here."""
        self.policy.require("fedfcm")
        local = self.local_fcm(centers, m=m, tol=tol, max_iter=max_iter)
        K = local.centers.shape[0]
        self._hold(local.centers, np.ones(K), local.global_objective)

    def hold_kmeans_init(self, k: int, *, seed: int) -> None:
        """Garst & Reinders' round 1 (local k-means++ seeding, one Lloyd step); keep the means
        and counts of the clusters with >= p points here."""
        self.policy.require("fkm")
        local = federated_kmeans.participant_init(
            self._in_memory(), k, p=self.policy.min_cluster_size, seed=seed
        )
        self._hold(local.means, local.counts.astype(np.float64), 0.0)

    def hold_kmeans_step(self, centers: ArrayLike) -> None:
        """Garst & Reinders' local step (drop global centers no local row is nearest to, one
        Lloyd step); keep the means and counts of the clusters with >= p points here."""
        self.policy.require("fkm")
        local = federated_kmeans.participant_step(
            self._rows, self._centers(centers), p=self.policy.min_cluster_size
        )
        self._hold(local.means, local.counts.astype(np.float64), 0.0)

    def _hold(self, points: FloatArray, weights: FloatArray, objective: float) -> None:
        self._held = (center_kmeans.LocalPoints(points, weights), objective)

    @property
    def held(self) -> tuple[center_kmeans.LocalPoints, float] | None:
        """The local centers, their weights and objective the last hold task kept (None
        before one); the agent saves them so a restart does not lose them."""
        return self._held

    def restore_held(self, points: ArrayLike, weights: ArrayLike, objective: float) -> None:
        """Take up held local centers saved before a restart (checked like fresh ones).

        Raises:
            ValueError: the points are not (P, n_features) with P weights, finite.
        """
        P = np.asarray(points, dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        if (
            P.ndim != 2 or P.shape[1] != self.n_features or w.shape != (P.shape[0],)
            or not (np.isfinite(P).all() and np.isfinite(w).all() and math.isfinite(objective))
        ):
            raise ValueError("saved local centers do not fit this participant's data.")
        self._hold(P, w, float(objective))

    def _held_points(self) -> tuple[center_kmeans.LocalPoints, float]:
        if self._held is None:
            raise RefusedError(
                "no local centers are held: a hold_local_fcm, hold_kmeans_init or "
                "hold_kmeans_step task must come first."
            )
        return self._held

    # -- a registered statistic (protocol.algorithms.StatisticSpec) -------------------------
    def statistic(
        self, name: str, centers: ArrayLike, params: Mapping[str, float] | None = None
    ) -> dict[str, FloatArray]:
        """The fields of the registered statistic ``name`` of the local rows (or the held local
        centers: its ``reads``) for ``centers`` and its declared ``params``, each of the shape
        the statistic declares.

        Refused unless an algorithm the policy allows asks it; when the params or the
        centers' shape are not the declared ones (checked again here: undeclared, missing or
        out of range parameters, a fixed number of centers); when its
        privacy rule on the declaration gives a reason (e.g. exact FCM's size rule, §4 of
        Corcuera Bárcena et al., on the lower edge of the declared row bucket: N >= that
        edge, so the paper's rule on N holds whenever this one does).
        """
        spec = algorithms.statistic(name)
        askers = [a for a in algorithms.names() if name in algorithms.get(a).statistics]
        if not askers:
            raise RefusedError(f"no registered algorithm asks a {name!r} statistic: refused.")
        self.policy.require(*askers)
        given = dict(params or {})
        C = np.asarray(centers, dtype=np.float64)
        if C.ndim < 2 or not np.all(np.isfinite(C)) or C.shape[-1] != self.n_features:
            raise RefusedError(f"a {name!r} statistic needs finite centers of width "
                               f"{self.n_features}.")
        try:
            spec.check_params(given)
            spec.check_centers(C.shape)
        except ValueError as exc:
            raise RefusedError(f"{exc}: refused.") from None
        rule = spec.refusal()
        reason = None if rule is None else rule(self.declaration, C.shape, self.n_features)
        if reason is not None:
            raise RefusedError(reason)
        source = self._rows if spec.reads == "rows" else self._held_points()
        fields = spec.compute()(source, C, **given)
        declared = spec.shapes(self.n_features, C.shape)
        out = {field: np.asarray(value, dtype=np.float64) for field, value in fields.items()}
        if {f: v.shape for f, v in out.items()} != declared:  # its code's fault, not the rows'
            raise RefusedError(f"statistic {name!r} computed fields of other shapes than it "
                               "declares: refused.")
        return out

    # -- choosing K -------------------------------------------------------------------------
    def local_k(
        self, k_min: int, k_max: int, *, m: float, seed: int | None
    ) -> int:
        """This participant's own choice of K from a local-only sweep (§2.2.3)."""
        return choose_k.participant_local_k(self._in_memory().X, k_min, k_max, m=m, seed=seed)

    # -- Dennis et al.: k-FED ---------------------------------------------------------------
    def kfed_centers(self, k_local: int, *, seed: int | None) -> FloatArray:
        """Local k-means centers of clusters with >= p points, for the one-shot k-FED baseline."""
        self.policy.require("kfed")
        return kfed.participant_local_centers(
            self._in_memory(), k_local, p=self.policy.min_cluster_size, seed=seed
        )

    def kfed_dennis_centers(self, k_local: int, *, seed: int | None) -> FloatArray:
        """Local k-means centers of clusters with >= p points, k-FED as Dennis et al. write it."""
        self.policy.require("kfed-dennis")
        return kfed.dennis_local_centers(
            self._in_memory(), k_local, p=self.policy.min_cluster_size, seed=seed
        )

    # -- evaluation (simulator only: a real agent never sends labels) ------------------------
    def assign(self, centers: ArrayLike) -> NDArray[np.intp]:
        """Hard assignment of the local rows to the nearest center."""
        return nearest(self._in_memory().X, self._centers(centers))


def reply_to(computations: Any, spec: msg.TaskSpec) -> msg.Reply:
    """The reply to one task from ``computations``, a :class:`LocalParticipant` or any object
    with the same computation methods (the tests' stand-ins); a refusal raises RefusedError.
    The one place a task meets its computation: the agent, the simulator and the plain
    summation all ask through it."""
    if isinstance(spec, MODEL_TASKS):
        if computations.model_tasks is None:
            raise RefusedError("this participant takes part in no model-based jobs.")
        reply: msg.Reply = computations.model_tasks.answer(spec)
        return reply
    match spec:
        case msg.ApplyStandardisationTask(mean=mean, scale=scale):
            computations.apply_standardisation(mean.to_numpy(), scale.to_numpy())
            return msg.AckReply()
        case msg.ReportCountTask():
            computations.report_count()
            return msg.AckReply()
        case msg.DeclareTask(terms=terms):
            return msg.DeclarationReply.of(computations.declare(terms))
        case msg.LocalFcmTask(centers=centers, m=m, tol=tol, max_iter=max_iter):
            return msg.LocalFcmReply.of(
                computations.local_fcm(centers.to_numpy(), m=m, tol=tol, max_iter=max_iter)
            )
        case msg.KfedCentersTask(k_local=k_local, seed=seed):
            return msg.KfedCentersReply(
                centers=msg.WireArray.of(computations.kfed_centers(k_local, seed=seed))
            )
        case msg.KfedDennisCentersTask(k_local=k_local, seed=seed):
            return msg.KfedCentersReply(
                centers=msg.WireArray.of(computations.kfed_dennis_centers(k_local, seed=seed))
            )
        case msg.LocalKTask(k_min=k_min, k_max=k_max, m=m, seed=seed):
            return msg.LocalKReply(k=computations.local_k(k_min, k_max, m=m, seed=seed))
        case msg.HoldLocalFcmTask(centers=centers, m=m, tol=tol, max_iter=max_iter):
            computations.hold_local_fcm(centers.to_numpy(), m=m, tol=tol, max_iter=max_iter)
            return msg.AckReply()
        case msg.HoldKmeansInitTask(k=k, seed=seed):
            computations.hold_kmeans_init(k, seed=seed)
            return msg.AckReply()
        case msg.HoldKmeansStepTask(centers=centers):
            computations.hold_kmeans_step(centers.to_numpy())
            return msg.AckReply()
        case msg.StatisticTask(name=name, centers=centers, params=params):
            fields = computations.statistic(name, centers.to_numpy(), params)
            return msg.StatisticReply(
                fields={field: msg.WireArray.of(value) for field, value in fields.items()}
            )
    raise RefusedError(f"this participant does not answer {spec.kind!r} tasks")
