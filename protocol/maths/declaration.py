"""A participant's declared public bounds: the only facts about its rows a job may rely on.

Rule of the project: nothing data-dependent leaves a participant unless it is declared, and a
refusal may depend only on the job and the participant's declared public policy. So every
check a participant or the coordinator makes about a participant's size or magnitude is made
against its :class:`Declaration`, sent in the clear at the start of every job, never against
its rows:

- ``row_bound`` R, a power of two, declares the bucket R/2 < N_l <= R of the participant's
  row count: an upper bound (the fixed-point encodings, ``coordinator.secure_sum``) and a
  lower bound :func:`min_rows` (the size rule of exact FCM, ``protocol.maths.exact_fcm``);
- ``value_bound`` B > 0 declares |x| <= B for every raw value of its rows (before any
  standardisation).

Each is either configured in the participant's policy (public by choice) or derived from its
rows when they are loaded: R = :func:`row_bucket` (the power of two at or above N_l) and
B = :func:`value_bucket` (the power of two at or above max|x|, at least 1). A derived bound
is a disclosure of the data (the bucket of N_l, the binary order of magnitude of max|x|) and
is marked so on the wire and in the disclosure ledger. The participant checks at load time
that its rows satisfy its declaration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Declaration", "is_power_of_two", "min_rows", "row_bucket", "value_bucket"]


@dataclass(frozen=True)
class Declaration:
    """One participant's public bounds (module docstring) and whether it enforces the size
    rule of exact FCM (its policy's ``enforce_fcm_rule``, public too).

    Attributes:
        row_bound: R, a power of two: R/2 < N_l <= R.
        value_bound: B > 0: |x| <= B for every raw value.
        row_bound_derived: R was derived from the rows (a disclosure), not configured.
        value_bound_derived: B was derived from the rows (a disclosure), not configured.
        enforces_fcm_rule: the participant refuses exact FCM unless its declared lower edge
            satisfies N·F > K(F+1).
    """

    row_bound: int
    value_bound: float
    row_bound_derived: bool
    value_bound_derived: bool
    enforces_fcm_rule: bool

    @property
    def min_rows(self) -> int:
        """The fewest rows the declared bucket allows (:func:`min_rows`)."""
        return min_rows(self.row_bound)

    def describe_rows(self) -> str:
        """The bucket in words, e.g. ``row_bound=64 (33 to 64 rows)``: public numbers only."""
        return f"row_bound={self.row_bound} ({self.min_rows} to {self.row_bound} rows)"


def is_power_of_two(n: int) -> bool:
    """Whether ``n`` is 1, 2, 4, 8, ..."""
    return n >= 1 and n & (n - 1) == 0


def row_bucket(n_rows: int) -> int:
    """The smallest power of two >= ``n_rows`` (>= 1): the derived ``row_bound``."""
    if n_rows < 1:
        raise ValueError(f"n_rows must be >= 1 to have a row bucket; got {n_rows}.")
    return 1 << (n_rows - 1).bit_length()


def min_rows(row_bound: int) -> int:
    """The lower edge of the bucket (R/2, R]: R//2 + 1 rows (1 for R = 1)."""
    if not is_power_of_two(row_bound):
        raise ValueError(f"row_bound must be a power of two; got {row_bound}.")
    return row_bound // 2 + 1


def value_bucket(largest: float) -> float:
    """The smallest power of two >= ``largest`` and >= 1: the derived ``value_bound``.

    The floor at 1 keeps data within [-1, 1] (already scaled) from disclosing its order of
    magnitude below 1.
    """
    if not math.isfinite(largest) or largest < 0:
        raise ValueError("largest must be a finite magnitude >= 0.")
    if largest <= 1.0:
        return 1.0
    mantissa, exponent = math.frexp(largest)  # largest = mantissa · 2^exponent, 0.5 <= m < 1
    return math.ldexp(1.0, exponent - 1 if mantissa == 0.5 else exponent)
