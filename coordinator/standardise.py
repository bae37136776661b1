"""Federated z-score standardisation: every participant's columns scaled by the union's
mean and population standard deviation, without pooling rows.

Round 1 collects Σx and Σx² (N = Σ_l N_l comes from the counting service) and gives the mean; by
default round 2 collects the same sums about that mean (``shift``), which removes the cancellation
of the one-pass variance formula (see ``protocol.standardise``). Then each participant replaces its
rows by their z-scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from numpy.typing import ArrayLike

from fedclust.coordinator._rounds import gather_required
from fedclust.coordinator.secure_sum import Summation
from fedclust.protocol import messages as msg
from fedclust.protocol._validation import FloatArray
from fedclust.protocol.standardise import MomentSums, combine_moments

__all__ = ["StandardisingParticipant", "moment_sums", "standardise_federation"]


class StandardisingParticipant(Protocol):
    """What the standardisation driver needs from a participant."""

    @property
    def name(self) -> str: ...

    def moment_sums(self, shift: ArrayLike | None = None) -> MomentSums: ...

    def apply_standardisation(self, mean: ArrayLike, scale: ArrayLike) -> None: ...


def moment_sums(
    participants: Sequence[StandardisingParticipant],
    shift: FloatArray | None = None,
    summation: Summation | None = None,
) -> list[MomentSums]:
    """Every participant's moment sums (plain), or their one secure total (``summation``)."""
    if summation is None:
        return gather_required(participants, lambda p: p.moment_sums(shift=shift))
    task = msg.MomentSumsTask(shift=None if shift is None else msg.WireArray.of(shift))
    total, _ = summation.sum(participants, task, msg.MomentSumsReply, required=True)
    return [total.to_result()]


def standardise_federation(
    participants: Sequence[StandardisingParticipant],
    total_count: Callable[[], int],
    *,
    two_pass: bool = True,
    summation: Summation | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Standardise every participant's data in place; return the federation's (mean, scale).

    Args:
        participants: at least one participant, all with the same columns.
        total_count: ΣN_l from the counting service.
        two_pass: also run the shifted second round (numerically stable variance). With
            False, one round of plain sums (relative error of the variance about
            N·ε·(1 + mean²/var); fine for data centred near 0).
        summation: sum the moments securely; None collects each participant's in the clear.

    Raises:
        ValueError: no participants.
        RefusedError: a participant refused a round (every participant must take part).
        ProtocolError: inconsistent contributions (different widths, or sums that do not
            fit ΣN_l).
        Whatever ``total_count`` raises (e.g. the counting service refusing a small cohort).
    """
    if len(participants) == 0:
        raise ValueError("standardise_federation needs at least one participant; got none.")
    n = total_count()
    mean, scale = combine_moments(moment_sums(participants, None, summation), n)
    if two_pass:
        mean, scale = combine_moments(moment_sums(participants, mean, summation), n)
    gather_required(participants, lambda p: p.apply_standardisation(mean, scale))
    return mean, scale
