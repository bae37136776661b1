"""Federated z-score standardisation: every participant's columns scaled by the union's
mean and population standard deviation, without pooling rows.

Round 1 collects Σx and Σx² (N = Σ_l N_l comes from the counting service) and gives the mean; by
default round 2 collects the same sums about that mean (``shift``), which removes the cancellation
of the one-pass variance formula (see ``protocol.maths.standardise``). Then each participant
replaces its rows by their z-scores.

Dropouts: a participant that does not answer a round has left the job, and the standardisation
starts again over the participants left, with their ΣN (:class:`PresentRows`): the mean and
scale are theirs alone. One that drops out while the scaling is applied leaves the others
scaled by statistics that include its rows (they cannot be scaled twice). A refusal fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from fedclust.coordinator._rounds import (
    MIN_PROTECTED_MEMBERS,
    gather_present,
    present,
    require_cohort,
)
from fedclust.coordinator.secure_sum import PlainSummation, Summation
from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.core.validation import FloatArray
from fedclust.protocol.maths.standardise import MomentSums, combine_moments
from fedclust.protocol.wire import messages as msg

__all__ = [
    "PresentRows", "StandardisingParticipant", "pooled_mean_scale", "pooled_moments",
    "standardise_federation",
]


class StandardisingParticipant(Protocol):
    """What the standardisation driver needs from a participant."""

    @property
    def name(self) -> str: ...

    @property
    def n_features(self) -> int: ...

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply to a task, here the ``moment_sums`` statistic and
        ``apply_standardisation``."""
        ...


def pooled_moments(
    participants: Sequence[StandardisingParticipant],
    shift: FloatArray | None = None,
    summation: Summation | None = None,
) -> tuple[MomentSums, tuple[str, ...]]:
    """The total moment sums of the participants present about ``shift`` (None: 0) and who
    contributed them: the ``moment_sums`` statistic, whose one public point is the shift.

    The same procedure whatever the protection: ``summation`` sums them (its dropouts
    recovered; None: in the clear, a :class:`PlainSummation`). A participant that does not
    answer drops out of the job and the round goes on without it.

    Raises:
        RefusedError: a participant present contributed nothing (a refusal).
    """
    live = present(participants)
    summation = summation if summation is not None else PlainSummation()
    point = np.zeros(participants[0].n_features) if shift is None else np.asarray(shift, np.float64)
    task = msg.StatisticTask.of("moment_sums", point[np.newaxis, :])
    reply, names = summation.sum(live, task, msg.StatisticReply)
    fields = msg.summands(reply)
    total = MomentSums(sum=fields["sum"], sum_sq=fields["sum_sq"], shift=point)
    missing = sorted({p.name for p in present(live)} - set(names))
    if missing:
        raise RefusedError(
            f"participant(s) {', '.join(missing)} gave no moment sums without dropping out "
            "(a refusal); every participant present must take part in standardisation"
        )
    return total, names


class PresentRows:
    """ΣN of the participants present (not dropped out): the N of a statistic pooled over them.

    With everyone present it is the counting service's total (``total_count``), asked once.
    After dropouts it comes from the moment sums of those left about the public shifts 0 and
    s = ``value_bound`` (Σx − Σ(x − s) = N·s per column), summed as every moment sum of
    the job (``summation``, or in the clear under "none"), over at least ``minimum``
    contributors; a dropout during these rounds repeats them over those left. A sum that
    would pair with an earlier total over more participants is refused by
    :class:`~coordinator._rounds.ReleasedCohorts`; where one is released, a note says so.

    Raises (when called):
        RefusedError: fewer than ``minimum`` participants are left after dropouts, or one
            present refuses its moment sums.
        ProtocolError: the moment sums give no positive N.
        Whatever ``total_count`` raises (e.g. the counting service refusing a small cohort).

    Design notes: ``docs/standardisation.md`` (§ The N of those present: disclosure).
    """

    def __init__(
        self,
        participants: Sequence[Any],
        total_count: Callable[[], int],
        *,
        value_bound: float,
        summation: Summation | None = None,
        minimum: int = MIN_PROTECTED_MEMBERS,
    ) -> None:
        self.value_bound = value_bound  # of the values the participants hold now
        self.notes: list[str] = []
        self._participants = list(participants)
        self._total_count = total_count
        self._summation = summation
        self._minimum = minimum
        self._known: dict[frozenset[str], int] = {}

    def __call__(self) -> int:
        while True:
            live = require_cohort(self._participants, self._minimum)
            names = frozenset(p.name for p in live)
            if names in self._known:
                return self._known[names]
            if len(live) == len(self._participants):
                if self._summation is not None and self._summation.cohorts is not None:
                    self._summation.cohorts.admit(names, "count total")
                self._known[names] = self._total_count()
            else:
                self._count(live)

    def _count(self, live: Sequence[Any]) -> None:
        """ΣN of the contributors of two moment rounds over ``live``, if they were the same."""
        first, names = pooled_moments(live, None, self._summation)
        shift = np.full(np.shape(first.sum), float(self.value_bound))
        second, again = pooled_moments(live, shift, self._summation)
        if set(names) != set(again):
            return  # someone dropped out in between: the caller asks those left again
        estimate = float(np.sum(first.sum - second.sum) / np.sum(shift))
        if not estimate >= 0.5:
            raise ProtocolError(
                f"the moment sums of {', '.join(names)} about two shifts give no positive "
                "number of rows: their contributions are inconsistent."
            )
        group = frozenset(names)
        before = any(group < known for known in self._known)
        self._known[group] = round(estimate)
        self.notes.append(
            f"ΣN of the participants left ({', '.join(sorted(group))}) from their moment sums "
            "about two public shifts, not from the counting service"
            + (
                "; with a total over more participants learned before, the coordinator can "
                "tell the rows of those who dropped out in between together."
                if before
                else "."
            )
        )


def pooled_mean_scale(
    participants: Sequence[StandardisingParticipant],
    total_count: Callable[[], int],
    *,
    two_pass: bool = True,
    summation: Summation | None = None,
) -> tuple[FloatArray, FloatArray]:
    """The per-feature mean and population standard deviation of the rows of the
    participants present, from their pooled moment sums (module docstring).

    ``total_count`` gives their ΣN_l and is asked before any participant is, once per
    attempt. A participant that drops out of a round starts the rounds again over those left.
    With ``two_pass`` a second round about the first mean removes the cancellation of the
    one-pass variance; without it the relative error of the variance is about
    N·ε·(1 + mean²/var).

    Raises:
        RefusedError: a participant present refused a round.
        ProtocolError: inconsistent contributions (different widths, or sums that do not
            fit ΣN_l).
        Whatever ``total_count`` raises.
    """
    while True:
        live = present(participants)
        everyone = {p.name for p in live}
        n = total_count()
        total, names = pooled_moments(live, None, summation)
        if set(names) != everyone:
            continue  # a dropout: start again over those left
        mean, scale = combine_moments([total], n)
        if two_pass:
            total, names = pooled_moments(live, mean, summation)
            if set(names) != everyone:
                continue
            mean, scale = combine_moments([total], n)
        return mean, scale


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
        total_count: ΣN_l of the participants present when it is called (the counting
            service's total; after dropouts :class:`PresentRows`); asked before any
            participant is.
        two_pass: also run the shifted second round (see :func:`pooled_mean_scale`).
        summation: sum the moments securely; None collects each participant's in the clear.

    A participant that drops out of a round starts the standardisation again over those
    left (module docstring).

    Raises:
        ValueError: no participants.
        RefusedError: a participant refused a round (every participant present must take
            part).
        ProtocolError: inconsistent contributions (different widths, or sums that do not
            fit ΣN_l).
        Whatever ``total_count`` raises (e.g. the counting service refusing a small cohort).
    """
    if len(participants) == 0:
        raise ValueError("standardise_federation needs at least one participant; got none.")
    mean, scale = pooled_mean_scale(
        participants, total_count, two_pass=two_pass, summation=summation
    )
    task = msg.ApplyStandardisationTask(
        mean=msg.WireArray.of(mean), scale=msg.WireArray.of(scale)
    )
    gather_present(participants, lambda *_: task, msg.AckReply)
    return mean, scale
