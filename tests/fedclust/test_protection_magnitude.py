"""Protected sums of any magnitude (issue 20): data in natural units — incomes from 1e5 to
~1.6e12, counts, balances of either sign — give under ``masking`` and ``paillier`` the K and
the centers that ``none`` gives.

Tolerance: 1e-9 of each column's largest center coordinate, per column, so the counts are
held to it as much as the incomes. The sums carry 40 fractional bits in as many 64-bit words
as their declared bounds need (``coordinator.secure_sum``): with 4 participants each decoded
sum is within 4·2^-41 ≈ 2e-12 of the exact one, far inside the tolerance. Under ``none`` the
same data always ran; before wider rings both protections refused them ("does not fit a
64-bit secure sum").

Paillier encrypts under a 2048-bit key (the simulator's key holder), ~100 packed values a
second: its cases keep one K and a few rounds, and the slower ones (FedFCM's server k-means
runs many sums) are marked ``slow`` (``pytest --run-slow``).
"""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.coordinator.secure_sum import field_encodings
from fedclust.data.federations import Federation
from fedclust.protocol.maths.declaration import row_bucket, value_bucket
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.messages import Algorithm, ProtectionScheme
from fedclust.simulate import SimulationReport, simulate

TOLERANCE = 1e-9
#: Three groups: (income, visits, balance) of each.
GROUPS = ((3e5, 2.0, -4e6), (4e9, 12.0, 1e7), (8e11, 40.0, 3e8))


def natural_units(seed: int = 0, participants: int = 4, rows: int = 150) -> Federation:
    """Incomes log-normal about 3e5, 4e9 and 8e11; visit counts; balances of either sign."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(participants):
        group = rng.integers(0, len(GROUPS), size=rows)
        income = np.array([GROUPS[g][0] for g in group]) * rng.lognormal(0.0, 0.3, rows)
        visits = rng.poisson([GROUPS[g][1] for g in group]).astype(np.float64)
        balance = np.array([GROUPS[g][2] for g in group]) * (1 + 0.2 * rng.standard_normal(rows))
        parts.append((np.column_stack([income, visits, balance]), group.astype(np.int64)))
    return Federation.from_pairs("natural-units", parts)


def run(
    algorithm: Algorithm, standardise: bool, protection: ProtectionScheme, ks: range,
    rounds: int,
) -> SimulationReport:
    return simulate(
        natural_units(), algorithm=algorithm, ks=ks, seed=0, standardise=standardise,
        protection=protection, max_rounds=rounds,
    )


def assert_same_per_column(plain: SimulationReport, protected: SimulationReport) -> None:
    assert protected.sweep.k_selected == plain.sweep.k_selected
    for p, q in zip(plain.sweep.entries, protected.sweep.entries, strict=True):
        assert q.k == p.k
        scale = np.abs(p.result.centers).max(axis=0)
        assert (scale > 0).all()
        np.testing.assert_array_less(np.abs(q.result.centers - p.result.centers) / scale, TOLERANCE)


def test_the_data_need_more_than_one_word() -> None:
    # What makes this the case: values to ~1.6e12 (declared bound 2^41) in buckets of
    # 256 rows; the raw Σ(x − s)² is bounded by 4 · 256 · 9 · 2^82 < 2^97, beyond the 2^61
    # where a single word stopped: with the 2^40 resolution it takes three words.
    fed = natural_units()
    largest = max(float(np.abs(part).max()) for part in fed.parts)
    rows = max(len(part) for part in fed.parts)
    assert (value_bucket(largest), row_bucket(rows)) == (2.0**41, 256)
    encoding = field_encodings(
        msg.StatisticTask.of("moment_sums", np.zeros((1, 3))), n_features=3, n_parties=4,
        max_rows=256, value_bound=2.0**41,
    )
    assert {e.name: e.words for e in encoding} == {"sum": 2, "sum_sq": 3}


@pytest.mark.parametrize("standardise", [False, True])
@pytest.mark.parametrize("algorithm", ["ffcm", "fedfcm", "fkm"])
def test_masking_equals_none_in_natural_units(algorithm: Algorithm, standardise: bool) -> None:
    plain = run(algorithm, standardise, "none", range(2, 5), 30)
    masked = run(algorithm, standardise, "masking", range(2, 5), 30)
    assert_same_per_column(plain, masked)


@pytest.mark.parametrize(
    ("algorithm", "standardise"),
    [
        ("ffcm", False),
        ("ffcm", True),
        ("fkm", False),
        pytest.param("fkm", True, marks=pytest.mark.slow),
        pytest.param("fedfcm", False, marks=pytest.mark.slow),
        pytest.param("fedfcm", True, marks=pytest.mark.slow),
    ],
)
def test_paillier_equals_none_in_natural_units(algorithm: Algorithm, standardise: bool) -> None:
    plain = run(algorithm, standardise, "none", range(3, 4), 3)
    encrypted = run(algorithm, standardise, "paillier", range(3, 4), 3)
    assert_same_per_column(plain, encrypted)
