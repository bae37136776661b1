"""Entry-point validation with one message style (modelled on scikit-learn's).

Public functions validate their inputs once with these helpers; internal helpers trust
their inputs. Messages name the argument and the expected form, and give the offending
value's type or shape, never data values (statistics must not be echoed).

The string rules every layer shares are written here once: an identifier and a SHA-256 hex
digest (their pydantic types are in :mod:`core.models`).
"""

from __future__ import annotations

import re
from typing import Any, Final, TypeGuard

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

#: An identifier (a participant, job, organisation or certificate name): at most
#: IDENTIFIER_MAX_LENGTH characters matching IDENTIFIER_PATTERN, as IDENTIFIER_TEXT says.
IDENTIFIER_PATTERN: Final = r"^[A-Za-z0-9_.-]+$"
IDENTIFIER_MAX_LENGTH: Final = 64
IDENTIFIER_TEXT: Final = (
    f"1-{IDENTIFIER_MAX_LENGTH} characters of letters, digits, '_', '.' or '-'"
)
#: A SHA-256 digest as services write it: 64 lowercase hexadecimal digits.
SHA256_HEX_PATTERN: Final = r"^[0-9a-f]{64}$"
_IDENTIFIER: Final = re.compile(IDENTIFIER_PATTERN)


def is_identifier(value: object) -> TypeGuard[str]:
    """Whether ``value`` is an identifier (a string; a trailing newline is refused too)."""
    return (
        isinstance(value, str) and len(value) <= IDENTIFIER_MAX_LENGTH
        and _IDENTIFIER.fullmatch(value) is not None
    )


def check_data(X: ArrayLike, *, name: str = "X", min_samples: int = 1) -> FloatArray:
    """Return ``X`` as a finite C-contiguous float64 array of shape (n_samples, n_features)."""
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric; got {type(X).__name__}.") from exc
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n_samples, n_features); "
            f"got an array of shape {arr.shape}."
        )
    if arr.shape[1] < 1:
        raise ValueError(f"{name} must have at least one feature; got shape {arr.shape}.")
    if arr.shape[0] < min_samples:
        raise ValueError(
            f"{name} has n_samples={arr.shape[0]}, which should be >= {min_samples}."
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinity.")
    return np.ascontiguousarray(arr)


def check_centers(C: ArrayLike, *, n_features: int, name: str = "centers") -> FloatArray:
    """Return centers as a finite float64 array of shape (n_clusters, n_features)."""
    arr = check_data(C, name=name)
    if arr.shape[1] != n_features:
        raise ValueError(
            f"{name} must have n_features={n_features} columns; got shape {arr.shape}."
        )
    return arr


def check_int(
    value: Any, *, name: str, owner: str, low: int, high: int | None = None
) -> int:
    """Check an integer parameter; message: "The 'k' parameter of fcm must be an int ..."."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if ok and value >= low and (high is None or value <= high):
        return int(value)
    upper = "inf)" if high is None else f"{high}]"
    raise ValueError(
        f"The '{name}' parameter of {owner} must be an int in the range [{low}, {upper}. "
        f"Got {value!r} instead."
    )


def check_float(
    value: Any,
    *,
    name: str,
    owner: str,
    low: float,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Check a real parameter against an interval given as bounds and openness."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok:
        v = float(value)
        above = v > low if low_open else v >= low
        below = high is None or (v < high if high_open else v <= high)
        if np.isfinite(v) and above and below:
            return v
    left = "(" if low_open else "["
    right = "inf)" if high is None else (f"{high})" if high_open else f"{high}]")
    raise ValueError(
        f"The '{name}' parameter of {owner} must be a float in the range {left}{low}, {right}. "
        f"Got {value!r} instead."
    )


def check_fuzzifier(m: Any, *, owner: str) -> float:
    """The fuzzifier m of fuzzy c-means must be > 1 (Bezdek 1981)."""
    return check_float(m, name="m", owner=owner, low=1.0, low_open=True)


def check_n_samples_for_k(n_samples: int, k: int, *, name: str = "X") -> None:
    """Data-dependent check: a clustering with k clusters needs at least k points."""
    if n_samples < k:
        raise ValueError(f"{name} has n_samples={n_samples}, which should be >= k={k}.")


def rng_from(seed: int | np.random.Generator | None) -> np.random.Generator:
    """A numpy Generator for *algorithmic* randomness (initialisations, sampling).

    Never used for masks, shares or keys: those come from the OS CSPRNG in ``crypto``.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)
