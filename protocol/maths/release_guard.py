"""The differencing guard of the counting service: may one more roster's total be released?

A released total of roster R is the equation ``a · N`` (``a`` the 0/1 indicator of R). With A
the matrix of the released rosters' rows plus the new one, the coordinator can derive
``x · N`` exactly when ``x`` lies in the row span V of A over the rationals.
:func:`release_would_expose` refuses (returns the participants) when V holds a nonzero ``x``
supported on fewer than ``min_cohort`` participants; :func:`exposed_participants` returns a
smallest such set, sorted, or None. The test uses the reduced row echelon form R of A: a set
T exposes a combination iff ``rank(R[S, F ∖ T]) < |S|`` (S the rows with a pivot in T, F the
free columns). Arithmetic is on Python integers (fraction-free), with no floating-point
tolerance. The inputs are rosters (public to the coordinator); counts never enter the module.

Design notes: ``docs/secure-sums.md`` (§ The differencing guard: the derivation).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from itertools import combinations

__all__ = ["exposed_participants", "release_would_expose"]


def release_would_expose(
    released_rosters: Iterable[Collection[str]], new_roster: Collection[str], min_cohort: int
) -> tuple[str, ...] | None:
    """Whose counts the new total, with the released ones, would expose in combination; or None.

    ``released_rosters`` are the rosters whose totals were released already. None means
    the totals of those rosters and of ``new_roster`` together determine no nonzero
    combination of the counts of fewer than ``min_cohort`` participants. Otherwise the
    result is a smallest such participant set, sorted.

    Cost, for n participants (columns) and r distinct rosters, rank ρ <= n: the elimination
    takes O(r·ρ·n) integer operations; the search tests at most Σ_{t < min_cohort} C(n, t)
    sets, each by the rank of at most t rows of at most n entries. For the default
    ``min_cohort`` = 3: O(r·n²) for the elimination plus O(n³) for the search.
    """
    return exposed_participants([*released_rosters, new_roster], min_cohort)


def exposed_participants(
    rosters: Iterable[Collection[str]], min_cohort: int
) -> tuple[str, ...] | None:
    """A smallest set of fewer than ``min_cohort`` participants (sorted) such that the totals
    of ``rosters`` determine a nonzero combination of their counts; None when there is none.
    """
    distinct = {frozenset(roster) for roster in rosters}
    names = sorted(set[str]().union(*distinct))
    column = {name: j for j, name in enumerate(names)}
    indicator = [[0] * len(names) for _ in distinct]
    for row, roster in zip(indicator, distinct, strict=True):
        for name in roster:
            row[column[name]] = 1
    found = _smallest_exposed_columns(_reduced_echelon(indicator), min_cohort)
    return None if found is None else tuple(names[j] for j in sorted(found))


def _primitive(row: list[int]) -> list[int]:
    """``row`` divided by the gcd of its entries (a nonzero row keeps its span)."""
    g = math.gcd(*row)
    return row if g <= 1 else [x // g for x in row]


def _eliminate(row: list[int], by: Sequence[int], pivot: int) -> list[int]:
    """``by[pivot]·row − row[pivot]·by``: ``row`` with column ``pivot`` cleared."""
    a, b = by[pivot], row[pivot]
    return _primitive([a * x - b * y for x, y in zip(row, by, strict=True)])


def _reduced_echelon(rows: Iterable[list[int]]) -> dict[int, list[int]]:
    """The reduced row echelon form of ``rows`` as {pivot column: row}, in integers.

    Each row is zero in every other row's pivot column. Rows are added one at a time: a new
    row is cleared in the existing pivots (O(ρ·n)); if something is left, its first nonzero
    column becomes a pivot and is cleared from the existing rows (O(ρ·n), at most n times).
    """
    basis: dict[int, list[int]] = {}
    for new in rows:
        row = new
        for pivot, by in basis.items():
            if row[pivot]:
                row = _eliminate(row, by, pivot)
        lead = next((j for j, x in enumerate(row) if x), None)
        if lead is None:
            continue
        row = _primitive(row)
        for pivot, by in basis.items():
            if by[lead]:
                basis[pivot] = _eliminate(by, row, lead)
        basis[lead] = row
    return basis


def _rank(rows: Sequence[Sequence[int]]) -> int:
    """The rank of a small integer matrix (fraction-free elimination)."""
    return len(_reduced_echelon(list(row) for row in rows))


def _smallest_exposed_columns(
    basis: dict[int, list[int]], min_cohort: int
) -> tuple[int, ...] | None:
    """A smallest column set T, |T| < ``min_cohort``, with rowspan ∩ span{e_T} ≠ {0}.

    T is a set S of pivots plus ``size − |S|`` free columns in the support of S's rows; it
    exposes a combination iff S's rows, restricted to their other free columns, are
    linearly dependent (see the module docstring).
    """
    pivots = sorted(basis)
    width = len(basis[pivots[0]]) if pivots else 0
    free = [j for j in range(width) if j not in basis]
    support = {p: frozenset(j for j in free if basis[p][j]) for p in pivots}
    for size in range(1, min_cohort):
        for k in range(1, size + 1):
            for chosen in combinations(pivots, k):
                reach = sorted(frozenset().union(*(support[p] for p in chosen)))
                for extra in combinations(reach, size - k):
                    rest = [j for j in reach if j not in extra]
                    if _rank([[basis[p][j] for j in rest] for p in chosen]) < k:
                        return (*chosen, *extra)
    return None
