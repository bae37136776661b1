"""FedCRef numpy core: association (eq. 2), groups, refinement (Alg. 2), stopping, dirty labels."""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.core.errors import ProtocolError
from fedclust.protocol.maths.fedcref import (
    AutoencoderSpec,
    ClusterRef,
    Grouping,
    assignment_agreement,
    association_scores,
    client_frozen,
    combine_fedavg,
    count_wrong_associations,
    counts_stable,
    dirty_labels,
    find_groups,
    greedy_refinement,
    participant_fedavg_contribution,
    symmetric_edges,
)

# Hand-worked values: a few float64 operations, exact to ~1e-15.
EXACT = 1e-12


def test_association_score_by_hand() -> None:
    # |own - other| = [0, 1, 2, 3, 4] -> scaled [0, .25, .5, .75, 1]; 75th percentile = 0.75
    # (numpy's linear interpolation: position 0.75 * 4 = 3 -> exactly the 4th value).
    own = np.zeros(5)
    other = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert association_scores(own, other)[0] == pytest.approx(0.75, abs=EXACT)
    # One outlier dominates: [0, 0, 0, 0, 10] -> scaled [0, 0, 0, 0, 1]; P75 = 0.
    other2 = np.array([0.0, 0.0, 0.0, 0.0, 10.0])
    assert association_scores(own, other2)[0] == pytest.approx(0.0, abs=EXACT)
    # Both columns at once, and alpha = 50 -> median of the scaled values.
    both = association_scores(own, np.stack([other, other2], axis=1), alpha=50.0)
    np.testing.assert_allclose(both, [0.5, 0.0], atol=EXACT)


def test_association_score_is_scale_free_and_uses_absolute_differences() -> None:
    rng = np.random.default_rng(0)
    own = rng.random(40)
    other = rng.random(40)
    s = association_scores(own, other)[0]
    # Scaling both error vectors by a constant does not change the min-max scaled differences.
    assert association_scores(7.0 * own, 7.0 * other)[0] == pytest.approx(s, rel=1e-9)
    # |own - other| is symmetric in its arguments.
    assert association_scores(other, own)[0] == pytest.approx(s, rel=1e-9)


def test_constant_differences_score_zero() -> None:
    assert association_scores([0.3], [0.5])[0] == 0.0
    assert association_scores([0.1, 0.2], [0.3, 0.4])[0] == 0.0


def test_association_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="NaN"):
        association_scores([0.1, np.nan], [0.1, 0.2])
    with pytest.raises(ValueError, match="shape"):
        association_scores([0.1, 0.2], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="alpha"):
        association_scores([0.1], [0.2], alpha=101)


def test_symmetric_edges_need_both_directions_and_different_clients() -> None:
    a, b, c, d = (0, 0), (1, 0), (2, 0), (0, 1)
    scores = {
        (a, b): 0.1, (b, a): 0.2,  # both <= 0.2 -> edge
        (a, c): 0.1, (c, a): 0.3,  # one direction fails -> no edge
        (b, c): 0.05,  # the other direction missing -> no edge
        (a, d): 0.0, (d, a): 0.0,  # same client -> never an edge
    }
    assert symmetric_edges(scores, theta=0.2) == [(a, b)]
    assert symmetric_edges(scores, theta=0.3) == [(a, b), (a, c)]


def test_symmetric_edges_keep_one_mutual_best_partner_per_participant() -> None:
    a, b1, b2, c = (0, 0), (1, 0), (1, 1), (2, 0)
    scores = {
        (a, b1): 0.10, (b1, a): 0.15,  # a's best at participant 1 (weight 0.15)
        (a, b2): 0.05, (b2, a): 0.18,  # also within θ, but weight 0.18 > 0.15
        (b2, c): 0.10, (c, b2): 0.10,  # b2 keeps its own partner at participant 2
    }
    assert symmetric_edges(scores, theta=0.2) == [(a, b1), (b2, c)]
    # Every symmetric edge on request (the literal reading).
    assert symmetric_edges(scores, theta=0.2, one_per_participant=False) == [
        (a, b1), (a, b2), (b2, c)
    ]
    # Not order-dependent: the same scores in another insertion order, same edges.
    assert symmetric_edges(dict(reversed(list(scores.items()))), theta=0.2) == [
        (a, b1), (b2, c)
    ]


def test_find_groups_components_and_isolated() -> None:
    clusters: list[ClusterRef] = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (3, 0)]
    edges = [((0, 0), (1, 0)), ((1, 0), (2, 0)), ((0, 1), (1, 1))]
    g = find_groups(clusters, edges)
    assert g.groups == (((0, 0), (1, 0), (2, 0)), ((0, 1), (1, 1)))
    assert g.isolated == ((3, 0),)
    assert g.participants(0) == (0, 1, 2)
    assert g.group_of()[(1, 1)] == 1
    # Order of inputs does not change the numbering.
    g2 = find_groups(clusters[::-1], edges[::-1])
    assert g2 == g
    assert find_groups([(0, 0)], []) == Grouping((), ((0, 0),))
    with pytest.raises(ValueError, match="edge"):
        find_groups([(0, 0)], [((0, 0), (5, 5))])


def test_greedy_refinement_by_hand() -> None:
    # Models 0, 1, 2; k = 2. Best models per sample: 0, 0, 0, 1, 2, 2 -> pick 0 first
    # (3 samples). Remaining samples 3, 4, 5 among models {1, 2}: best 1, 2, 2 -> pick 2.
    # Sample 3 is left and goes to its best picked model among {0, 2}: errors .5 vs .6 -> 0.
    E = np.array(
        [
            [0.1, 0.9, 0.9],
            [0.1, 0.9, 0.9],
            [0.1, 0.9, 0.9],
            [0.5, 0.2, 0.6],
            [0.9, 0.9, 0.1],
            [0.9, 0.3, 0.1],
        ]
    )
    np.testing.assert_array_equal(greedy_refinement(E, 2), [0, 0, 0, 0, 2, 2])
    # k = 3 keeps all three; samples go to their argmin.
    np.testing.assert_array_equal(greedy_refinement(E, 3), [0, 0, 0, 1, 2, 2])
    # min_size = 2: model 1 would win a single sample, so it is not kept.
    np.testing.assert_array_equal(greedy_refinement(E, 3, min_size=2), [0, 0, 0, 0, 2, 2])


def test_greedy_refinement_keeps_at_least_one_model_and_never_empty_clusters() -> None:
    E = np.array([[0.1, 0.2], [0.2, 0.1]])
    out = greedy_refinement(E, 2, min_size=5)
    assert np.unique(out).shape[0] == 1
    rng = np.random.default_rng(3)
    E = rng.random((50, 7))
    out = greedy_refinement(E, 4)
    kept = np.unique(out)
    assert kept.shape[0] <= 4
    assert all(np.any(out == j) for j in kept)


def test_stopping_rules() -> None:
    assert assignment_agreement([0, 0, 1, 1], [1, 1, 0, 0]) == 1.0
    assert client_frozen(0.8, tau=0.8)
    assert not client_frozen(0.79, tau=0.8)
    assert not counts_stable([(10, 2), (10, 2)])  # fewer than three iterations
    assert counts_stable([(5, 9), (10, 2), (10, 2), (10, 2)])
    assert counts_stable([(20, 0), (19, 0), (20, 0)])  # 1 <= 0.1 * 20
    assert not counts_stable([(10, 2), (10, 3), (10, 2)])  # small counts must not change
    assert not counts_stable([(10, 2), (8, 2), (10, 2)])


def test_dirty_labels_rate_and_never_keep_a_flipped_label() -> None:
    y = np.repeat([3, 7, 9], 2000)
    out = dirty_labels(y, 0.3, seed=0)
    clean = np.repeat([0, 1, 2], 2000)
    changed = np.mean(out != clean)
    # 6000 Bernoulli(0.3) draws: sd = sqrt(.3*.7/6000) = 0.006; 0.03 is 5 sd.
    assert abs(changed - 0.3) < 0.03
    assert set(np.unique(out)) == {0, 1, 2}
    np.testing.assert_array_equal(dirty_labels(y, 0.0), clean)
    np.testing.assert_array_equal(dirty_labels(y, 0.3, seed=4), dirty_labels(y, 0.3, seed=4))
    # d = 1: every label changes (a different local label is always drawn).
    assert np.all(dirty_labels(y, 1.0, seed=1) != clean)
    # One class: nothing to swap with.
    np.testing.assert_array_equal(dirty_labels(np.ones(5), 0.9, seed=0), np.zeros(5))
    with pytest.raises(ValueError, match="dirtiness"):
        dirty_labels(y, 1.5)


def test_fedavg_from_sums_equals_weighted_mean() -> None:
    spec = AutoencoderSpec(4, (3, 2))
    assert spec.layer_dims == ((4, 3), (3, 2), (2, 3), (3, 4))
    assert spec.n_params == 15 + 8 + 9 + 16
    rng = np.random.default_rng(0)
    thetas = [rng.standard_normal(spec.n_params) for _ in range(3)]
    ns = [5, 1, 14]
    contribs = [participant_fedavg_contribution(t, n) for t, n in zip(thetas, ns, strict=True)]
    sums = {k: sum(c[k] for c in contribs) for k in ("weighted_params", "n")}
    expected = sum(n * t for n, t in zip(ns, thetas, strict=True)) / 20
    # float32 output: relative error ~6e-8.
    np.testing.assert_allclose(combine_fedavg(sums, spec), expected, rtol=1e-6, atol=1e-6)
    with pytest.raises(ProtocolError, match="parameters"):
        combine_fedavg({"weighted_params": np.ones(3), "n": np.array([1.0])}, spec)
    with pytest.raises(ProtocolError, match="positive"):
        combine_fedavg({"weighted_params": np.ones(spec.n_params), "n": np.array([0.0])}, spec)


def test_wrong_associations() -> None:
    g = Grouping((((0, 0), (1, 0), (2, 1)), ((0, 1), (2, 0))), ((1, 1),))
    majority = {(0, 0): 4, (1, 0): 4, (2, 1): 7, (0, 1): 2, (2, 0): 2, (1, 1): 9}
    assert count_wrong_associations(g, majority) == 1


def test_the_code_and_paper_presets_differ_where_docs_fedcref_says() -> None:
    """docs/fedcref.md § Presets: the authors' code associates at theta 0.25 and freezes at
    0.85; the paper states 0.2 and 0.8; the rest is shared."""
    from fedclust.protocol import algorithms
    from fedclust.protocol.algorithms.fedcref_params import FedCRefParams

    spec = algorithms.get("fedcref")
    code = FedCRefParams(**spec.preset("code"))
    paper = FedCRefParams(**spec.preset("paper"))
    differ = {k for k, v in code.model_dump().items() if getattr(paper, k) != v}
    assert differ == {"theta", "tau"}
    assert (code.theta, code.tau, paper.theta, paper.tau) == (0.25, 0.85, 0.2, 0.8)
