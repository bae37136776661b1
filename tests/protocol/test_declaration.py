"""Declared public bounds (protocol.maths.declaration) and the exact-FCM size rule on the declared
bucket (protocol.maths.exact_fcm.declared_rule_refusal): a function of public facts only."""

from __future__ import annotations

import re

import pytest

from fedclust.protocol.maths.declaration import is_power_of_two, min_rows, row_bucket, value_bucket
from fedclust.protocol.maths.exact_fcm import declared_rule_refusal, largest_allowed_k, rule_allows


@pytest.mark.parametrize(
    ("n_rows", "bucket"), [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (59, 64), (64, 64), (65, 128)]
)
def test_the_row_bucket_holds_the_row_count(n_rows: int, bucket: int) -> None:
    assert row_bucket(n_rows) == bucket
    assert is_power_of_two(bucket)
    assert min_rows(bucket) <= n_rows <= bucket  # both edges are public bounds on N


@pytest.mark.parametrize(
    ("largest", "bound"),
    [(0.0, 1.0), (0.3, 1.0), (1.0, 1.0), (1.5, 2.0), (2.0, 2.0), (2.0000001, 4.0),
     (1e6, 2.0**20), (2.0**20, 2.0**20)],
)
def test_the_value_bucket_is_the_power_of_two_at_or_above_and_at_least_one(
    largest: float, bound: float
) -> None:
    assert value_bucket(largest) == bound


def test_min_rows_refuses_a_bucket_that_is_not_a_power_of_two() -> None:
    with pytest.raises(ValueError, match="power of two"):
        min_rows(48)


# -- the exact-FCM rule on the declared bucket ------------------------------------------------
# F = 2: the rule needs N·2 > K·3. Bucket 64 has lower edge 33: 66 > 3K, so K <= 21 passes and
# K = 22 is refused, whatever N in 33..64 the participant really holds.
@pytest.mark.parametrize(("k", "refused"), [(21, False), (22, True)])
def test_the_rule_is_evaluated_on_the_lower_edge_of_the_bucket(k: int, refused: bool) -> None:
    reason = declared_rule_refusal(64, k, 2)
    assert (reason is not None) is refused
    assert largest_allowed_k(min_rows(64), 2) == 21
    assert rule_allows(33, 21, 2) and not rule_allows(33, 22, 2)
    if reason is not None:
        assert "privacy rule of Corcuera Bárcena et al." in reason
        assert "row_bound=64" in reason and "guarantees only 33" in reason


def test_the_refusal_is_the_same_for_every_row_count_in_the_bucket() -> None:
    # N = 40 and N = 64 differ in the paper's rule at K = 30 (80 <= 90 < 128), not here.
    assert not rule_allows(40, 30, 2) and rule_allows(64, 30, 2)
    reason = declared_rule_refusal(row_bucket(40), 30, 2)
    assert reason is not None and reason == declared_rule_refusal(row_bucket(64), 30, 2)
    assert re.search(r"\b40\b", reason) is None
