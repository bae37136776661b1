"""The SecAgg+ masking graph: seed from everyone's nonces, k-regular symmetric Harary ring,
the two-gap connectivity rule, and parameters meeting the union bounds they report."""

from __future__ import annotations

import hashlib
import math
import secrets
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components
from scipy.stats import binom

from fedclust.crypto import _prg
from fedclust.crypto.graph import GraphParameters, MaskingGraph, graph_parameters


def ids(n: int) -> list[str]:
    return [f"org-{i:03d}" for i in range(n)]


def nonces_for(names: list[str]) -> dict[str, bytes]:
    return {p: secrets.token_bytes(32) for p in names}


def adjacency(graph: MaskingGraph) -> np.ndarray:
    index = {p: i for i, p in enumerate(graph.nodes)}
    A = np.zeros((len(index), len(index)), dtype=bool)
    for p in graph.nodes:
        for q in graph.neighbours(p):
            A[index[p], index[q]] = True
    return A


def bfs_connected(graph: MaskingGraph, members: set[str]) -> bool:
    """Reference: breadth-first search on the subgraph induced by ``members``."""
    if len(members) <= 1:
        return True
    start = next(iter(members))
    seen, frontier = {start}, [start]
    while frontier:
        node = frontier.pop()
        for peer in graph.neighbours(node):
            if peer in members and peer not in seen:
                seen.add(peer)
                frontier.append(peer)
    return seen == members


# -- the seed --------------------------------------------------------------------------------------


def test_graph_is_reproducible_from_the_same_nonces() -> None:
    names = ids(40)
    nonces = nonces_for(names)
    a = MaskingGraph.derive("job-1", nonces, degree=6)
    shuffled = dict(reversed(list(nonces.items())))  # the order of the adverts is irrelevant
    b = MaskingGraph.derive("job-1", shuffled, degree=6)
    fresh = MaskingGraph(names, a.seed, 6)  # a new object, not the cached one
    for g in (b, fresh):
        assert g.seed == a.seed and g.digest == a.digest
        assert all(g.neighbours(p) == a.neighbours(p) for p in names)
    # The seed is the documented hash: SHA-256 over the prefix, job, degree, ids and nonces.
    parts: list[str | int | bytes] = [_prg.GRAPH_PREFIX, "job-1", 6]
    for p in sorted(nonces):
        parts += [p, nonces[p]]
    assert a.seed == hashlib.sha256(_prg.label(*parts)).digest()


def test_any_one_nonce_changes_the_graph() -> None:
    # No party chooses the seed alone: whoever fixes all the other nonces, one honest
    # participant's fresh nonce moves the seed and (almost surely) the ring.
    names = ids(30)
    nonces = nonces_for(names)
    base = MaskingGraph.derive("job-1", nonces, degree=4)
    seeds = {base.seed}
    for p in names:
        changed = MaskingGraph.derive("job-1", {**nonces, p: secrets.token_bytes(32)}, degree=4)
        assert changed.seed not in seeds and changed.digest != base.digest
        seeds.add(changed.seed)
        assert any(changed.neighbours(q) != base.neighbours(q) for q in names)
    # The job and the degree are bound into the seed too.
    assert MaskingGraph.derive("job-2", nonces, degree=4).seed != base.seed
    assert MaskingGraph.derive("job-1", nonces, degree=6).seed != base.seed
    # Dropping an advertiser changes the node set and the seed.
    fewer = dict(nonces)
    del fewer[names[0]]
    assert MaskingGraph.derive("job-1", fewer, degree=4).seed != base.seed


def test_digest_binds_nodes_seed_and_degree() -> None:
    names = ids(20)
    seed = secrets.token_bytes(32)
    g = MaskingGraph(names, seed, 4)
    assert MaskingGraph(reversed(names), seed, 4).digest == g.digest
    assert MaskingGraph(names, secrets.token_bytes(32), 4).digest != g.digest
    assert MaskingGraph(names, seed, 6).digest != g.digest
    assert MaskingGraph(names[:-1], seed, 4).digest != g.digest


# -- structure -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k"), [(5, 2), (12, 4), (30, 6), (101, 30), (200, 30), (32, 30)])
def test_every_node_has_k_neighbours_and_the_relation_is_symmetric(n: int, k: int) -> None:
    names = ids(n)
    g = MaskingGraph.derive("job", nonces_for(names), degree=k)
    assert g.degree == k and g.nodes == tuple(sorted(names))
    A = adjacency(g)
    assert (A.sum(axis=1) == k).all()
    assert np.array_equal(A, A.T)
    assert not A.diagonal().any()
    for p in names:
        assert list(g.neighbours(p)) == sorted(g.neighbours(p))
    # Independent rebuild of the construction: the ring in SHA-256(seed ‖ id) order, each
    # node linked to the k/2 ring positions on either side.
    ring = sorted(names, key=lambda p: hashlib.sha256(g.seed + p.encode()).digest())
    for i, p in enumerate(ring):
        expected = {ring[(i + s) % n] for s in range(-k // 2, k // 2 + 1) if s}
        assert set(g.neighbours(p)) == expected


def test_complete_graph_when_the_degree_reaches_n_minus_1() -> None:
    names = ids(7)
    for degree in (None, 6, 8):
        g = MaskingGraph(names, b"s" * 32, degree)
        assert g.degree is None
        for p in names:
            assert set(g.neighbours(p)) == set(names) - {p}
        assert g.connected(names[:2]) and g.connected([names[0], names[4]])


@pytest.mark.parametrize(("n", "k"), [(12, 2), (20, 4), (30, 6), (41, 8), (9, 4)])
def test_connected_agrees_with_bfs_on_random_subsets(n: int, k: int) -> None:
    rng = np.random.default_rng(n * 100 + k)
    names = ids(n)
    g = MaskingGraph.derive("job", nonces_for(names), degree=k)
    outcomes = set()
    for _ in range(600):
        keep = rng.uniform(0.2, 1.0)
        members = {p for p in names if rng.random() < keep}
        expected = bfs_connected(g, members)
        assert g.connected(members) == expected
        outcomes.add(expected)
    # ... on both sides of the rule: the sample contains connected and disconnected sets.
    assert outcomes == {True, False}


def test_connected_two_gap_rule_at_its_edges() -> None:
    n, k = 20, 4
    names = ids(n)
    g = MaskingGraph(names, b"x" * 32, k)
    ring = sorted(names, key=lambda p: hashlib.sha256(g.seed + p.encode()).digest())
    everyone = set(ring)
    # One run of k/2 missing positions leaves a path: connected.
    assert g.connected(everyone - {ring[3], ring[4]})
    # A run of k/2 − 1 missing positions is bridged: two such runs stay connected.
    assert g.connected(everyone - {ring[3], ring[10]})
    # Two runs of k/2 missing positions cut the ring in two.
    cut = everyone - {ring[3], ring[4], ring[12], ring[13]}
    assert not g.connected(cut) and not bfs_connected(g, cut)
    # A long run and a short one: still connected.
    assert g.connected(everyone - {ring[i] for i in range(3, 12)} - {ring[15]})
    # Wrap-around: the runs 18, 19 and 0, 1 together are one run of four.
    assert g.connected(everyone - {ring[18], ring[19], ring[0], ring[1]})
    assert g.connected({ring[0]}) and g.connected(set())


# -- parameters ------------------------------------------------------------------------------------


def union_bounds(n: int, k: int, t: int, gamma: float, delta: float) -> tuple[float, float]:
    """The module docstring's three bounds, recomputed: log2(P1 + P2), log2(P3)."""
    p1 = n * (gamma + delta) ** (k / 2) if k < n - 1 else 0.0
    p2 = n * float(binom.sf(t - 2, k, gamma))  # P[Bin(k, γ) ≥ t − 1]
    p3 = n * float(binom.sf(k + 1 - t, k, delta))  # P[Bin(k, δ) > k + 1 − t]
    privacy = math.log2(p1 + p2) if p1 + p2 > 0 else -math.inf
    unmask = math.log2(p3) if p3 > 0 else -math.inf
    return privacy, unmask


def meets(n: int, k: int, t: int, g: float, d: float, sigma: int, eta: int) -> bool:
    privacy, unmask = union_bounds(n, k, t, g, d)
    return privacy <= -sigma and unmask <= -eta


@pytest.mark.parametrize("n", [3, 4, 5, 10, 20])
def test_small_cohorts_get_the_complete_graph_with_a_majority_threshold(n: int) -> None:
    p = graph_parameters(n)
    assert p.degree is None and p.neighbours == n - 1
    assert p.threshold == n // 2 + 1
    privacy, unmask = union_bounds(n, n - 1, p.threshold, p.corrupt_fraction, p.dropout_fraction)
    assert p.log2_privacy_failure == pytest.approx(privacy, abs=1e-9)
    assert p.log2_unmask_failure == pytest.approx(unmask, abs=1e-9)
    assert "complete graph" in p.describe()


@pytest.mark.parametrize(
    ("n", "gamma", "delta", "sigma", "eta"),
    [
        (100, 0.05, 0.05, 40, 20),
        (120, 0.05, 0.05, 40, 20),
        (200, 0.05, 0.05, 40, 20),
        (1000, 0.05, 0.05, 40, 20),
        (10_000, 0.05, 0.05, 40, 20),
        (500, 0.1, 0.1, 40, 20),
        (500, 0.02, 0.2, 30, 30),
        (2000, 0.05, 0.05, 60, 30),
    ],
)
def test_sparse_parameters_meet_the_requested_bits(
    n: int, gamma: float, delta: float, sigma: int, eta: int
) -> None:
    p = graph_parameters(
        n, corrupt_fraction=gamma, dropout_fraction=delta, security_bits=sigma,
        correctness_bits=eta,
    )
    assert isinstance(p, GraphParameters) and p.participants == n
    assert p.degree is not None and p.degree % 2 == 0 and 4 <= p.degree < n - 1
    k, t = p.degree, p.threshold
    assert 2 <= t <= k + 1
    # The reported bounds are the docstring's formulas, and they meet the request.
    privacy, unmask = union_bounds(n, k, t, gamma, delta)
    assert p.log2_privacy_failure == pytest.approx(privacy, abs=1e-9)
    assert p.log2_unmask_failure == pytest.approx(unmask, abs=1e-9)
    assert privacy <= -sigma and unmask <= -eta
    # Minimal: no smaller even degree meets both bounds with any threshold, and with this
    # degree a smaller threshold (down to the floor of 3) breaks privacy.
    for smaller in range(4, k, 2):
        assert not any(
            meets(n, smaller, u, gamma, delta, sigma, eta) for u in range(2, smaller + 2)
        )
    assert t <= 3 or union_bounds(n, k, t - 1, gamma, delta)[0] > -sigma
    assert f"{k}-regular graph" in p.describe()


def test_degree_grows_slowly_with_n() -> None:
    degrees = {n: graph_parameters(n).degree for n in (100, 1000, 10_000, 100_000)}
    assert all(d is not None for d in degrees.values())
    d100, d10k = degrees[100], degrees[10_000]
    assert d100 is not None and d10k is not None
    assert d100 < 100 // 2 and d10k <= d100 + 10
    values = [d for d in degrees.values() if d is not None]
    assert values == sorted(values)  # non-decreasing in n


def test_full_and_invalid_parameters() -> None:
    p = graph_parameters(500, full=True)
    assert p.degree is None and p.threshold == 251 and p.neighbours == 499
    for bad in ({"corrupt_fraction": 0.5}, {"dropout_fraction": 0.6}, {"corrupt_fraction": -0.1}):
        with pytest.raises(ValueError, match="fractions"):
            graph_parameters(100, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 3"):
        graph_parameters(2)


# -- Monte Carlo ---------------------------------------------------------------------------------


def test_random_dropouts_of_the_stated_fraction_leave_a_good_graph() -> None:
    n, trials = 200, 2000
    p = graph_parameters(n)
    assert p.degree is not None
    names = ids(n)
    g = MaskingGraph.derive("job", nonces_for(names), degree=p.degree)
    A = adjacency(g)
    rng = np.random.default_rng(11)
    dropped_count = round(p.dropout_fraction * n)
    removed_count = round((p.dropout_fraction + p.corrupt_fraction) * n)
    assert dropped_count == 10 and removed_count == 20
    min_holders, worst = n, 0
    for _ in range(trials):
        order = rng.permutation(n)
        alive = np.ones(n, dtype=bool)
        alive[order[:dropped_count]] = False
        # (3): every survivor keeps t share holders (surviving neighbours and itself).
        holders = A[alive][:, alive].sum(axis=1) + 1
        min_holders = min(min_holders, int(holders.min()))
        assert holders.min() >= p.threshold
        # (2): with the next 5% corrupted, no honest node has t − 1 corrupted neighbours.
        corrupt = np.zeros(n, dtype=bool)
        corrupt[order[dropped_count:removed_count]] = True
        worst = max(worst, int(A[~corrupt][:, corrupt].sum(axis=1).max()))
        # (1): the survivors stay connected, and so do the honest survivors when the
        # corrupted fraction is removed as well — by the two-gap rule and by a reference
        # connected-components count.
        for count in (dropped_count, removed_count):
            keep = np.ones(n, dtype=bool)
            keep[order[:count]] = False
            members = {names[i] for i in np.flatnonzero(keep)}
            assert g.connected(members)
            sub = csr_matrix(A[keep][:, keep])
            assert connected_components(sub, directed=False, return_labels=False) == 1
    assert min_holders < p.degree + 1  # the dropouts did hit some neighbourhoods
    assert 0 < worst < p.threshold - 1


def test_the_readme_states_the_parameters_graph_parameters_gives() -> None:
    # The README's SecAgg+ table (default fractions and bits) is what the code picks.
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in readme.splitlines()
        if line.strip().startswith("| participants n") or line.strip().startswith(
            ("| neighbours k", "| threshold t")
        )
    }
    sizes = [int(n.replace(",", "")) for n in rows["participants n"]]
    for n, k_text, t_text in zip(sizes, rows["neighbours k"], rows["threshold t"], strict=True):
        params = graph_parameters(n)
        assert int(k_text.split()[0]) == params.neighbours, n
        assert ("complete" in k_text) == (params.degree is None), n
        assert int(t_text) == params.threshold, n


def test_the_note_for_three_participants_explains_why_its_bound_is_weak() -> None:
    p = graph_parameters(3)
    text = p.describe()
    # The bound in words, with the percentage a reader can weigh: 3·(1 − 0.95²) ≈ 29 %.
    percent = round(100 * 3 * (1 - (1 - p.corrupt_fraction) ** 2))
    exponent = math.ceil(p.log2_privacy_failure)
    assert 2.0**exponent >= 2.0**p.log2_privacy_failure  # the printed power bounds it
    assert f"≤ 2^{exponent} (about {percent}%)" in text
    assert "colluded with the coordinator with probability 5%" in text
    assert "weak because the cohort is small: 1 colluder reaches the threshold" in text
    assert "one unmasking view per round" in text and "README" in text


def test_the_note_for_a_large_cohort_states_the_bound_without_excuses() -> None:
    p = graph_parameters(1000)
    text = p.describe()
    assert p.degree is not None and f"{p.degree}-regular graph of 1000 participants" in text
    assert f"undone is ≤ 2^{math.ceil(p.log2_privacy_failure)}," in text
    assert p.log2_privacy_failure <= -p.security_bits and "weak" not in text
