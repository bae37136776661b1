"""Protection is a summation, not an algorithm (issue 9): masked, Paillier and plain runs of
the same job give the same K, the same centers at every K (up to the fixed-point rounding)
and the same number of participants behind every center.

Tolerance. Every protected sum is exact up to its fixed-point rounding (with the bounds
derived from the participants' declarations, 25-40 fractional bits here: < 1e-10 of the
data's scale per center). FedFCM's local FCM stops at ||U_t − U_{t−1}|| < 1e-4, so two
broadcasts 1e-12 apart can leave local centers ~1e-8 apart; measured center differences are
<= 1e-11 (exact FCM, federated k-means) and <= 1.2e-7 (FedFCM on bank) of the largest center
coordinate. We allow 1e-6 of it. FedFuzzDB divides by center distances, so its tolerance
grows where two centers nearly coincide (``tests/fedclust/_compare.py``). The server's
k-means decides on values rounded to 6 significant digits, so neither rounding steers it.

The default run keeps a fast subset; the whole matrix of the issue (G2 D ∈ {2, 16, 64} ×
σ ∈ {10, 20, 30}, Garst's grid β ∈ {0.1, 1, 10} at K 14–18, bank standardised at K 2–8, each
for ffcm, fedfcm and fkm and several seeds) is marked ``slow``: ``pytest --run-slow -m slow``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from sklearn.cluster import KMeans

from fedclust.data.federations import Federation, build_federation
from fedclust.protocol.maths.center_kmeans import LocalPoints, PointsOracle, center_kmeans
from fedclust.protocol.maths.federated_kmeans import participant_init
from fedclust.protocol.maths.fedfcm import participant_local_fcm
from fedclust.protocol.wire.messages import Algorithm, ProtectionScheme
from fedclust.simulate import SimulationReport, simulate
from tests.fedclust._compare import assert_same_answer

Builder = Callable[[int], Federation]


def _shared(name: str, participants: int = 5) -> Builder:
    def build(seed: int) -> Federation:
        return build_federation(dataset=name, participants=participants, seed=seed)

    return build


def _garst(beta: float) -> Builder:
    def build(seed: int) -> Federation:
        return build_federation(dataset="garst-grid", beta=beta, participants=4, seed=seed)

    return build


def _motivational(seed: int) -> Federation:
    return build_federation(dataset="motivational", seed=seed)


def _run(
    fed: Federation, algorithm: Algorithm, ks: range, seed: int, standardise: bool,
    protection: ProtectionScheme,
) -> SimulationReport:
    return simulate(
        fed, algorithm=algorithm, ks=ks, seed=seed, standardise=standardise,
        protection=protection,
    )


def _compare(
    build: Builder, algorithm: Algorithm, ks: range, seed: int, standardise: bool = False,
    protection: ProtectionScheme = "masking",
) -> SimulationReport:
    fed = build(seed)
    plain = _run(fed, algorithm, ks, seed, standardise, "none")
    protected = _run(fed, algorithm, ks, seed, standardise, protection)
    assert_same_answer(plain, protected)
    return plain


# -- the default run: a fast subset -------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["ffcm", "fedfcm", "fkm"])
@pytest.mark.parametrize("seed", [0, 1])
def test_motivational_masked_equals_plain(algorithm: Algorithm, seed: int) -> None:
    plain = _compare(_motivational, algorithm, range(2, 9), seed)
    if algorithm == "fedfcm":
        assert plain.sweep.k_selected == 5  # the paper's answer


def test_motivational_paillier_equals_plain() -> None:
    _compare(_motivational, "fedfcm", range(5, 6), 0, protection="paillier")


@pytest.mark.parametrize("algorithm", ["ffcm", "fedfcm", "fkm"])
def test_g2_masked_equals_plain_and_finds_two(datasets: Path, algorithm: Algorithm) -> None:
    # The first case: G2 D = 16, σ = 20, 5 participants, K 2..6. Protected FedFCM
    # used to select K = 5 here (reported centers nobody supported).
    plain = _compare(_shared("g2-16-20"), algorithm, range(2, 7), 0)
    if algorithm == "fedfcm":  # the paper's claim (Table 3) is FedFCM's
        assert plain.sweep.k_selected == 2


def test_garst_grid_fkm_masked_equals_plain(datasets: Path) -> None:
    # The second case (β = 0.1, 4 clients, K = 16): mean ARI 0.954 plain, 0.83-0.85
    # masked before; now one procedure.
    aris = []
    for seed in range(3):
        plain = _compare(_garst(0.1), "fkm", range(16, 17), seed)
        assert plain.ari is not None
        aris.append(plain.ari[0])
    assert np.mean(aris) >= 0.93


def test_a_constant_column_gets_no_invented_center(tmp_path: Path) -> None:
    # The third case: a column that is 1.0 in every row; masked FedFCM returned a
    # center at 1.30 there. Centers are means of local centers: the column stays 1.0.
    rng = np.random.default_rng(0)
    blobs = np.vstack([c + rng.normal(0, 0.05, size=(80, 2)) for c in ([0, 0], [1, 0], [0, 1])])
    X = np.column_stack([blobs, np.ones(len(blobs))])
    order = rng.permutation(len(X))
    fed = Federation.from_pairs(
        "constant", [(X[i], np.zeros(len(i), dtype=np.int64)) for i in np.array_split(order, 4)]
    )
    plain = _run(fed, "fedfcm", range(2, 6), 0, False, "none")
    masked = _run(fed, "fedfcm", range(2, 6), 0, False, "masking")
    assert_same_answer(plain, masked)
    assert masked.sweep.k_selected == 3
    for entry in masked.sweep.entries:
        np.testing.assert_allclose(entry.result.centers[:, 2], 1.0, atol=1e-6)


def test_min_center_contributors_withholds_a_center_one_participant_forms() -> None:
    # Participants 0-2 hold two groups each; participant 3 holds one of them and, alone, a
    # far group: at K = 3 the far group's center rests on one participant.
    rng = np.random.default_rng(1)
    groups = np.array([[0.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    parts = [
        np.vstack([rng.normal(0, 0.05, size=(30, 2)) + groups[g] for g in (0, 1)])
        for _ in range(3)
    ]
    parts.append(np.vstack([rng.normal(0, 0.05, size=(30, 2)) + groups[g] for g in (0, 2)]))
    fed = Federation.from_pairs("lonely", [(X, np.zeros(len(X), dtype=np.int64)) for X in parts])
    report = simulate(
        fed, algorithm="fkm", ks=[3], seed=0, protection="masking", min_center_contributors=2
    )
    doc = report.to_document()
    entry = doc.sweep[0]
    assert entry.center_contributors is not None
    lonely = [j for j, n in enumerate(entry.center_contributors) if n == 1]
    assert len(lonely) == 1
    assert entry.centers[lonely[0]] is None
    assert all(c is not None for j, c in enumerate(entry.centers) if j != lonely[0])
    assert any("withheld" in note and "min_center_contributors=2" in note for note in doc.notes)
    # The default (1, the papers') releases it.
    doc1 = simulate(fed, algorithm="fkm", ks=[3], seed=0, protection="masking").to_document()
    assert all(c is not None for c in doc1.sweep[0].centers)


def _held_local_centers(fed: Federation, k: int, kind: str, seed: int) -> list[LocalPoints]:
    """What the server's k-means sees in round 1: FedFCM's local FCM centers (unit weights)
    from a random start, or federated k-means' local means and counts."""
    rng = np.random.default_rng(seed)
    X = np.vstack(fed.parts)
    start = rng.uniform(X.min(axis=0), X.max(axis=0), size=(k, X.shape[1]))
    held = []
    for i, part in enumerate(fed.parts):
        if kind == "fedfcm":
            local = participant_local_fcm(part, start, m=2.0, tol=1e-4, max_iter=1000)
            held.append(LocalPoints(local.centers, np.ones(k)))
        else:
            means = participant_init(part, k, seed=100 * seed + i)
            held.append(LocalPoints(means.means, means.counts.astype(np.float64)))
    return held


@pytest.mark.parametrize("kind", ["fedfcm", "fkm"])
@pytest.mark.parametrize(
    ("name", "k"),
    [("motivational", 5), ("xclara", 3), ("g2-16-20", 4), ("g2-64-30", 6), ("s-set1", 15),
     ("garst-0.1", 16), ("garst-10", 16)],
)
def test_private_seeding_is_as_good_as_kmeans_plus_plus(
    datasets: Path, name: str, k: int, kind: str
) -> None:
    # The server's k-means needs no local center in the clear; scikit-learn's k-means++
    # needs them all. On what the server clusters (seeds 0-2), ours must reach the same or
    # a lower inertia than 10 k-means++ restarts. Measured over seeds 0-4 of these cases and
    # of bank (unstandardised, fkm, K = 8): 74 of 75 at or below, one at +0.23 % (bank).
    builder = {
        "motivational": _motivational, "garst-0.1": _garst(0.1), "garst-10": _garst(10.0),
    }.get(name, _shared(name))
    for seed in range(3):
        held = _held_local_centers(builder(seed), k, kind, seed)
        points = np.vstack([h.points for h in held])
        weights = np.concatenate([h.weights for h in held])
        found = center_kmeans(PointsOracle(held), k, points.shape[1], seed=seed)
        reference = KMeans(k, n_init=10, random_state=seed).fit(points, sample_weight=weights)
        assert found.empty == 0
        assert found.inertia <= reference.inertia_ * (1 + 1e-9)


# -- the whole matrix (slow) ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ffcm", "fedfcm", "fkm"])
@pytest.mark.parametrize("sigma", [10, 20, 30])
@pytest.mark.parametrize("dim", [2, 16, 64])
def test_matrix_g2(datasets: Path, dim: int, sigma: int, algorithm: Algorithm) -> None:
    for seed in (0, 1):
        plain = _compare(_shared(f"g2-{dim}-{sigma}"), algorithm, range(2, 7), seed)
        if algorithm == "fedfcm":  # the paper's claim (Table 3) is FedFCM's
            assert plain.sweep.k_selected == 2


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ffcm", "fedfcm", "fkm"])
@pytest.mark.parametrize("beta", [0.1, 1.0, 10.0])
def test_matrix_garst_grid(datasets: Path, beta: float, algorithm: Algorithm) -> None:
    for seed in (0, 1):
        _compare(_garst(beta), algorithm, range(14, 19), seed)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ffcm", "fedfcm", "fkm"])
def test_matrix_xclara(datasets: Path, algorithm: Algorithm) -> None:
    for seed in (0, 1):
        _compare(_shared("xclara"), algorithm, range(2, 7), seed)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ffcm", "fedfcm", "fkm"])
def test_matrix_bank_standardised(datasets: Path, algorithm: Algorithm) -> None:
    _compare(_shared("bank"), algorithm, range(2, 9), 0, standardise=True)
