"""The masking graph of SecAgg+ (Bell et al., CCS 2020) and the parameters it needs.

:class:`MaskingGraph`: the nodes on a ring in the order of SHA-256(seed ‖ id), the seed hashed
from the job and every signed advert nonce; degree k (even) links the k/2 nodes on either side
(a Harary graph H_{k,n}), ``degree=None`` is the complete graph (Bonawitz et al.);
:meth:`MaskingGraph.connected` checks a subset in O(n).

:func:`graph_parameters` takes the smallest even k, then the smallest t ≥ 3, with
P(1) + P(2) ≤ 2^−σ and P(3) ≤ 2^−η for Bell et al.'s conditions (§3, "good" graphs: honest
survivors connected; no honest node with t − 1 corrupted neighbours; t share holders per
survivor), bounded by n·q^{k/2}, n·P[Bin(k, γ) ≥ t − 1] and n·P[Bin(k, δ) > k + 1 − t]
(q = γ + δ); where k reaches n − 1, the complete graph with a majority threshold.

Design notes: ``docs/secure-sums.md`` (§ The masking graph and its parameters).
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.stats import binom

from fedclust.crypto import _prg

__all__ = ["GraphParameters", "MaskingGraph", "graph_parameters", "shared_graph"]

DEFAULT_CORRUPT_FRACTION = 0.05
DEFAULT_DROPOUT_FRACTION = 0.05
DEFAULT_SECURITY_BITS = 40
DEFAULT_CORRECTNESS_BITS = 20


@dataclass(frozen=True)
class GraphParameters:
    """Degree k (None: complete graph), threshold t and the bounds they give (log2)."""

    participants: int
    degree: int | None
    threshold: int
    corrupt_fraction: float
    dropout_fraction: float
    log2_privacy_failure: float
    log2_unmask_failure: float
    security_bits: int = DEFAULT_SECURITY_BITS

    @property
    def neighbours(self) -> int:
        return self.participants - 1 if self.degree is None else self.degree

    def describe(self) -> str:
        """The guarantee in words for a job's notes: both bounds as probabilities under
        Bell et al.'s model (each participant colludes with the coordinator with probability
        γ and drops out with probability δ, independently) and, where the privacy bound
        misses 2^−σ (a small cohort), why it is weak and what protects the cohort then."""
        n, t = self.participants, self.threshold
        graph = "complete graph" if self.degree is None else f"{self.degree}-regular graph"
        text = (
            f"masking on a {graph} of {n} participants (threshold {t}): if each colluded "
            f"with the coordinator with probability {self.corrupt_fraction:.0%} and dropped "
            f"out with probability {self.dropout_fraction:.0%}, the chance that some honest "
            f"participant's masks could be undone is {_probability(self.log2_privacy_failure)}"
            f", and that a sum fails to unmask {_probability(self.log2_unmask_failure)}"
        )
        if self.log2_privacy_failure <= -self.security_bits:
            return text
        colluders = "1 colluder reaches" if t == 2 else f"{t - 1} colluders reach"
        return text + (
            f". The bound is weak because the cohort is small: {colluders} the threshold "
            "with the participant's own share; the counting service's one unmasking view "
            "per round keeps each input hidden unless it colludes too (README: Threat model)"
        )


def _probability(log2_p: float) -> str:
    """``≤ 2^e`` with e = ⌈log2 p⌉ (so 2^e ≥ p: a bound, not a rounding), with the
    percentage where it is at least 0.1 %; 0 for an impossible event."""
    if log2_p == -math.inf:
        return "0"
    bound = f"≤ 2^{math.ceil(log2_p)}"
    p = 2.0**log2_p
    return f"{bound} (about {p:.0%})" if p >= 0.01 else (
        f"{bound} (about {p:.1%})" if p >= 0.001 else bound
    )


def _log2(p: float) -> float:
    return -math.inf if p <= 0 else math.log2(p)


def _bounds(n: int, k: int, t: int, gamma: float, delta: float) -> tuple[float, float]:
    disconnect = n * (gamma + delta) ** (k // 2) if k < n - 1 else 0.0
    corrupt = n * float(binom.sf(t - 2, k, gamma))
    unmask = n * float(binom.sf(k + 1 - t, k, delta))
    return _log2(disconnect + corrupt), _log2(unmask)


def graph_parameters(
    n: int,
    *,
    corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION,
    dropout_fraction: float = DEFAULT_DROPOUT_FRACTION,
    security_bits: int = DEFAULT_SECURITY_BITS,
    correctness_bits: int = DEFAULT_CORRECTNESS_BITS,
    full: bool = False,
) -> GraphParameters:
    """The sparsest graph meeting the module's bounds for ``n`` participants (or, with
    ``full``, the complete graph with threshold ⌊n/2⌋ + 1)."""
    if n < 3:
        raise ValueError("a masking graph needs at least 3 participants.")
    gamma, delta = corrupt_fraction, dropout_fraction
    if not (0 <= gamma < 0.5 and 0 <= delta < 0.5 and gamma + delta < 1):
        raise ValueError("corrupt and dropout fractions must lie in [0, 0.5).")
    if not full:
        for k in range(4, n - 1, 2):
            if n * (gamma + delta) ** (k // 2) > 2.0**-security_bits:
                continue
            for t in range(3, k + 2):
                privacy, unmask = _bounds(n, k, t, gamma, delta)
                if privacy <= -security_bits:
                    if unmask <= -correctness_bits:
                        return GraphParameters(
                            n, k, t, gamma, delta, privacy, unmask, security_bits
                        )
                    break  # a larger t only raises the unmasking failure
    t = n // 2 + 1
    privacy, unmask = _bounds(n, n - 1, t, gamma, delta)
    return GraphParameters(n, None, t, gamma, delta, privacy, unmask, security_bits)


def _position_key(seed: bytes, node: str) -> bytes:
    return hashlib.sha256(seed + node.encode("utf-8")).digest()


class MaskingGraph:
    """A job's masking graph over ``nodes`` (sorted ids): ring order from the seed."""

    def __init__(self, nodes: Iterable[str], seed: bytes, degree: int | None) -> None:
        self.nodes: tuple[str, ...] = tuple(sorted(nodes))
        n = len(self.nodes)
        if degree is not None and not (2 <= degree < n - 1 and degree % 2 == 0):
            degree = None  # k >= n − 1 links everyone
        self.seed = seed
        self.degree = degree
        ring = sorted(self.nodes, key=lambda p: _position_key(seed, p))
        self.node_set = frozenset(self.nodes)
        self._ring = ring
        self._position = {p: i for i, p in enumerate(ring)}
        self._connected: dict[frozenset[str], bool] = {}  # the latest few answers
        self._lock = threading.Lock()

    @classmethod
    def derive(
        cls, job_id: str, nonces: Mapping[str, bytes], *, degree: int | None
    ) -> MaskingGraph:
        """The graph of the advertisers whose nonces are given (the module's seed rule)."""
        parts: list[str | int | bytes] = [_prg.GRAPH_PREFIX, job_id, degree or 0]
        for node in sorted(nonces):
            parts += [node, nonces[node]]
        seed = hashlib.sha256(_prg.label(*parts)).digest()
        return shared_graph(tuple(sorted(nonces)), seed, degree)

    @cached_property
    def digest(self) -> str:
        """SHA-256 (hex) of the nodes, seed and degree: equal graphs, equal digests."""
        return hashlib.sha256(
            _prg.label(self.seed, self.degree or 0, *self.nodes)
        ).hexdigest()

    def neighbours(self, node: str) -> tuple[str, ...]:
        """The node's neighbours, sorted."""
        if self.degree is None:
            return tuple(p for p in self.nodes if p != node)
        n, i, half = len(self._ring), self._position[node], self.degree // 2
        return tuple(sorted(
            self._ring[(i + step) % n] for step in (*range(-half, 0), *range(1, half + 1))
        ))

    def connected(self, members: Iterable[str]) -> bool:
        """Whether ``members`` induce a connected subgraph (a node set of the graph).

        The latest answers are remembered: a simulator's participants all ask about the
        same cohort."""
        key = frozenset(members)
        with self._lock:
            answer = self._connected.get(key)
            if answer is None:
                answer = self._connectivity(key)
                if len(self._connected) >= 8:
                    self._connected.pop(next(iter(self._connected)))
                self._connected[key] = answer
        return answer

    def _connectivity(self, members: frozenset[str]) -> bool:
        if len(members) <= 1 or self.degree is None:
            return True
        positions = np.sort(np.fromiter((self._position[p] for p in members), dtype=np.int64))
        gaps = np.diff(np.append(positions, positions[0] + len(self._ring)))
        # Edges span at most k/2 ring steps: one wider gap leaves a path, two cut the ring.
        return int(np.count_nonzero(gaps > self.degree // 2)) <= 1


@functools.lru_cache(maxsize=64)
def shared_graph(nodes: tuple[str, ...], seed: bytes, degree: int | None) -> MaskingGraph:
    """One graph object per (nodes, seed, degree) in a process: the simulator's participants
    share it instead of each sorting the ring again (the graph is immutable)."""
    return MaskingGraph(nodes, seed, degree)
