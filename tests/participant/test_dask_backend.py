"""The Dask backend: statistics over a local Dask cluster equal the numpy ones, bit for bit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from fedclust.core.validation import FloatArray
from fedclust.participant.local import LocalParticipant
from fedclust.protocol import algorithms
from fedclust.protocol.maths import exact_fcm, federated_kmeans, standardise, validity
from fedclust.protocol.maths._fuzzy import objective
from fedclust.protocol.maths.rows import BLOCK_ROWS, RowSource, as_rows

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from fedclust.participant.dask_backend import DaskRows  # noqa: E402

N = 2 * BLOCK_ROWS + 501


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with (
        distributed.LocalCluster(
            processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def _data() -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(3)
    means = np.array([[0.0, 0.0, 0.0, 0.0], [5.0, 1.0, 0.0, 2.0], [0.0, 6.0, 2.0, -1.0]])
    X = means[rng.integers(0, 3, size=N)] + rng.standard_normal((N, 4))
    return X, means + 0.3


STATISTICS: dict[str, Callable[[RowSource, FloatArray], Any]] = {
    "fcm sums": lambda r, C: exact_fcm.participant_sums(r, C, m=2.0),
    "objective": lambda r, C: (objective(r, C, 2.0),),
    "fuzzy db": lambda r, C: validity.participant_fuzzy_db_sums(r, C, m=2.0, q=1.0),
    "silhouette": lambda r, C: validity.participant_silhouette_sums(r, C),
    "moments": lambda r, C: standardise.participant_moments(r, shift=C[0]),
    "k-means step": lambda r, C: federated_kmeans.participant_step(r, C, p=2),
}


def _arrays(value: Any) -> list[FloatArray]:
    if hasattr(value, "__dataclass_fields__"):
        return [np.asarray(getattr(value, f)) for f in value.__dataclass_fields__]
    return [np.asarray(v) for v in value]


@pytest.mark.parametrize("name", sorted(STATISTICS))
@pytest.mark.parametrize("dask_chunk", [777, BLOCK_ROWS, N])
def test_dask_statistics_equal_numpy(client: Any, name: str, dask_chunk: int) -> None:
    X, C = _data()
    # Small budget: several chunks (whole blocks each) on the cluster, whatever the input chunks.
    rows = DaskRows(da.from_array(X, chunks=(dask_chunk, 4)), budget_bytes=BLOCK_ROWS * 32)
    assert (rows.n_rows, rows.n_features) == X.shape
    ours = _arrays(STATISTICS[name](rows, C))
    reference = _arrays(STATISTICS[name](as_rows(X), C))
    for a, b in zip(ours, reference, strict=True):
        assert np.array_equal(a, b), name


def test_dask_rows_read_back_in_memory(client: Any) -> None:
    X, _ = _data()
    rows = DaskRows(da.from_array(X.astype(np.float32), chunks=(1000, 4)))
    assert np.array_equal(rows.in_memory().X, X.astype(np.float32).astype(np.float64))


def test_non_finite_rows_are_refused_on_the_cluster(client: Any) -> None:
    X, C = _data()
    X[N - 3, 2] = np.inf
    rows = DaskRows(da.from_array(X, chunks=(1000, 4)))
    with pytest.raises(ValueError, match="contains NaN or infinity"):
        exact_fcm.participant_sums(rows, C, m=2.0)


def test_unknown_chunk_sizes_are_refused() -> None:
    X, _ = _data()
    arr = da.from_array(X, chunks=(1000, 4))
    unknown = arr[arr[:, 0] > 0]
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        DaskRows(unknown)


#: The parameters asked of the registered statistics that take some.
PARAMS: dict[str, dict[str, float]] = {
    "fcm_sums": {"m": 2.0}, "fuzzy_db_sums": {"m": 2.0, "q": 1.0},
}


@pytest.mark.parametrize(
    "name", [n for n in algorithms.statistic_names() if algorithms.statistic(n).reads == "rows"]
)
def test_every_registered_statistic_of_the_rows_streams_through_dask(
    client: Any, name: str
) -> None:
    """The generic ``statistic`` task over Dask rows: the same fields, bit for bit."""
    X, C = _data()
    points = algorithms.statistic(name).points
    C = C if points is None else np.resize(C, (*points, C.shape[-1]))  # the shape it takes
    rows = DaskRows(da.from_array(X, chunks=(777, 4)), budget_bytes=BLOCK_ROWS * 32)
    ours = LocalParticipant(rows, name="dask").statistic(name, C, PARAMS.get(name))
    reference = LocalParticipant(X, name="numpy").statistic(name, C, PARAMS.get(name))
    assert ours.keys() == reference.keys()
    for field, value in ours.items():
        assert np.array_equal(value, reference[field]), field
