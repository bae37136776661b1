"""The differencing guard (protocol.maths.release_guard), checked against independent linear
algebra.

The independent check is numpy's floating-point rank on small 0/1 matrices: the rows of A
span a nonzero vector supported inside T iff rank(A[:, not T]) < rank(A).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import combinations

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy.linalg import null_space

from fedclust.protocol.maths.release_guard import exposed_participants, release_would_expose

#: The attack of issue 9: five ordinary jobs whose totals, solved together, give every N_l.
ATTACK = [("p1", "p2", "p3"), ("p1", "p2", "p4"), ("p1", "p3", "p5"), ("p2", "p4", "p5"),
          ("p3", "p4", "p5")]
COUNTS = {"p1": 60, "p2": 77, "p3": 94, "p4": 111, "p5": 128}


def indicator(rosters: Sequence[Collection[str]], names: Sequence[str]) -> NDArray[np.float64]:
    return np.array([[1.0 if p in r else 0.0 for p in names] for r in rosters]).reshape(
        len(rosters), len(names)
    )


def exposing_sets(
    rosters: Sequence[Collection[str]], min_cohort: int
) -> list[tuple[str, ...]]:
    """Every participant set T, |T| < min_cohort, with a derivable combination: brute force."""
    names = sorted(set[str]().union(*rosters))
    A = indicator(rosters, names)
    rank = np.linalg.matrix_rank(A)
    found = []
    for size in range(1, min_cohort):
        for T in combinations(range(len(names)), size):
            rest = [j for j in range(len(names)) if j not in T]
            if np.linalg.matrix_rank(A[:, rest]) < rank:
                found.append(tuple(names[j] for j in T))
    return found


def no_count_is_determined(rosters: Sequence[Collection[str]]) -> bool:
    """No e_i in the row span: every row of a nullspace basis of A is nonzero."""
    names = sorted(set[str]().union(*rosters))
    kernel = null_space(indicator(rosters, names))
    return bool(np.all(np.linalg.norm(kernel, axis=1) > 1e-9))


def test_the_attack_is_solvable_without_the_guard() -> None:
    names = sorted(COUNTS)
    A = indicator(ATTACK, names)
    totals = A @ np.array([COUNTS[p] for p in names], dtype=float)
    solved, *_ = np.linalg.lstsq(A, totals, rcond=None)
    assert np.allclose(solved, [COUNTS[p] for p in names])


def test_the_attack_is_refused_at_the_roster_completing_the_system() -> None:
    """With only single counts protected (min 2), the fifth roster is the one refused."""
    for i in range(4):
        assert release_would_expose(ATTACK[:i], ATTACK[i], 2) is None
        assert no_count_is_determined(ATTACK[: i + 1])
    assert release_would_expose(ATTACK[:4], ATTACK[4], 2) == ("p1",)
    assert not no_count_is_determined(ATTACK)


def test_the_attack_is_refused_at_its_second_roster_with_pairs_protected() -> None:
    """With min 3, {p1,p2,p3} then {p1,p2,p4} give N_3 − N_4: refused at once."""
    assert release_would_expose([], ATTACK[0], 3) is None
    assert release_would_expose(ATTACK[:1], ATTACK[1], 3) == ("p3", "p4")
    # an attacker going on after each refusal gets only rosters that stay safe together
    released = [ATTACK[0]]
    for roster in ATTACK[1:]:
        if release_would_expose(released, roster, 3) is None:
            released.append(roster)
    assert released == [ATTACK[0], ATTACK[3]]
    assert exposing_sets(released, 3) == []


def test_two_rosters_differing_by_one_participant_are_refused() -> None:
    assert release_would_expose([("a", "b", "c")], ("a", "b", "c", "d"), 3) == ("d",)
    assert release_would_expose([("a", "b", "c", "d")], ("a", "b", "c"), 3) == ("d",)
    assert release_would_expose([("a", "b", "c", "d")], ("b", "c", "d"), 2) == ("a",)


def test_rosters_differing_by_at_least_the_minimum_pass() -> None:
    assert release_would_expose([("a", "b", "c")], ("a", "b", "c", "d", "e", "f"), 3) is None
    assert release_would_expose([("a", "b", "c")], ("d", "e", "f"), 3) is None
    assert release_would_expose([("a", "b", "c", "d")], ("a", "b", "e", "f"), 3) is None


def test_a_combination_of_two_counts_is_refused_below_three() -> None:
    # N_e + N_f by difference, and N_c − N_d from two rosters of equal size
    assert release_would_expose([("a", "b", "c", "d")], ("a", "b", "c", "d", "e", "f"), 3) == (
        "e", "f")
    assert release_would_expose([("a", "b", "c")], ("a", "b", "d"), 3) == ("c", "d")
    assert release_would_expose([("a", "b", "c")], ("a", "b", "d"), 2) is None


def test_a_repeated_roster_reveals_nothing_new() -> None:
    roster = ("a", "b", "c")
    assert release_would_expose([roster, roster, ("c", "b", "a")], roster, 3) is None


def test_a_roster_below_the_minimum_is_its_own_exposure() -> None:
    assert release_would_expose([], ("a", "b"), 3) == ("a", "b")
    assert exposed_participants([], 3) is None


def test_thirty_participants_in_blocks_of_three_stay_safe() -> None:
    """Unions of fixed blocks of three span no count of fewer than three; one more split does."""
    names = [f"p{i:02d}" for i in range(30)]
    blocks = [names[i : i + 3] for i in range(0, 30, 3)]
    rng = np.random.default_rng(7)
    rosters = {
        tuple(p for b, take in zip(blocks, rng.random(10) < 0.5, strict=True) if take for p in b)
        for _ in range(300)
    }
    released = [r for r in rosters if len(r) >= 3]
    assert len(released) > 100
    assert release_would_expose(released[:-1], released[-1], 3) is None
    assert release_would_expose(released, ("p00", "p01", "p03"), 3) is not None


@pytest.mark.parametrize("min_cohort", [2, 3, 4])
def test_random_histories_agree_with_brute_force(min_cohort: int) -> None:
    """A service's history: each roster is released iff brute force finds no exposure."""
    rng = np.random.default_rng(min_cohort)
    outcomes = {True: 0, False: 0}
    for _ in range(60):
        n = int(rng.integers(4, 9))
        names = [f"q{j}" for j in range(n)]
        released: list[tuple[str, ...]] = []
        for _ in range(6):
            size = int(rng.integers(1, n + 1))
            roster = tuple(sorted(rng.choice(names, size=size, replace=False).tolist()))
            brute = exposing_sets([*released, roster], min_cohort)
            found = release_would_expose(released, roster, min_cohort)
            outcomes[found is None] += 1
            if found is None:
                assert brute == []
                released.append(roster)
            else:
                assert found in brute  # a set that truly exposes a combination ...
                assert len(found) == min(len(t) for t in brute)  # ... and a smallest one
    assert min(outcomes.values()) > 50  # both answers were exercised
