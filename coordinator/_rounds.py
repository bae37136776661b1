"""What every round driver shares: the initial centers and gathering one round's answers.

Gathering is the one place a coordinator talks to participants, so the in-process simulator
and the network service differ only in the participant objects handed to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from fedclust.coordinator.result import RoundRecord
from fedclust.protocol._validation import FloatArray, check_centers
from fedclust.protocol.errors import RefusedError

#: Fewest distinct participants whose sum can hide each member's contribution (a group sum of
#: FedCRef or fed-distill with fewer members is formed in the clear and noted).
MIN_PROTECTED_MEMBERS = 3


class Named(Protocol):
    """A participant as the round machinery sees it."""

    @property
    def name(self) -> str: ...


P = TypeVar("P", bound=Named)
T = TypeVar("T")


def resolve_init(
    init: ArrayLike | None, k: int, n_features: int, rng: np.random.Generator
) -> FloatArray:
    """Validated (K, D) initial centers; None draws them uniformly in [0, 1]^D.

    The uniform unit-cube start is the authors' (Stallmann & Wilbik; Corcuera Bárcena et al.):
    it assumes data scaled to [0, 1]. The K sweep passes centers drawn from the federation's
    moments instead (``coordinator.sweep.initial_centers``).
    """
    if init is None:
        return rng.uniform(0.0, 1.0, size=(k, n_features))
    centers = check_centers(init, n_features=n_features, name="init")
    if centers.shape[0] != k:
        raise ValueError(f"init must have k={k} rows; got shape {centers.shape}.")
    return centers


class RoundLog:
    """The rounds of one run, each also passed to an optional observer as it completes."""

    def __init__(self, on_round: Callable[[RoundRecord], None] | None = None) -> None:
        self.records: list[RoundRecord] = []
        self._on_round = on_round

    def add(self, record: RoundRecord) -> None:
        """Record a finished round and tell the observer."""
        self.records.append(record)
        if self._on_round is not None:
            self._on_round(record)


class Gatherer:
    """Collects one round's answers, asking every participant at once (one thread each).

    A participant that raises :class:`RefusedError` (its policy or a privacy rule) is left
    out of that round and its first refusal is recorded in :attr:`notes`; a round in which
    every participant refuses fails with ``RefusedError``. With ``required=True`` (rounds
    whose result would be wrong without everyone: counting, standardisation, validation)
    any refusal fails the round, naming the participant.
    """

    def __init__(self) -> None:
        self.notes: list[str] = []
        self._refused: set[str] = set()

    def gather(
        self,
        round_number: int,
        participants: Sequence[P],
        ask: Callable[[int, P], T],
        *,
        required: bool = False,
    ) -> tuple[list[T], tuple[str, ...]]:
        """Ask each participant (with its index); return the answers and who gave them."""
        outcomes = _ask_all(participants, ask)
        answers: list[T] = []
        names: list[str] = []
        last: RefusedError | None = None
        for participant, outcome in zip(participants, outcomes, strict=True):
            if isinstance(outcome, RefusedError):
                if required:
                    raise RefusedError(f"participant {participant.name!r} refused: {outcome}")
                last = outcome
                if participant.name not in self._refused:
                    self._refused.add(participant.name)
                    self.notes.append(f"participant {participant.name!r} refused: {outcome}")
                continue
            answers.append(outcome)
            names.append(participant.name)
        if last is not None and not answers:
            raise RefusedError(
                f"round {round_number}: every participant asked refused; last reason: {last}"
            )
        return answers, tuple(names)


def gather_required(participants: Sequence[P], ask: Callable[[P], T]) -> list[T]:
    """Every participant's answer to one question; any refusal fails (see :class:`Gatherer`)."""
    answers, _ = Gatherer().gather(0, participants, lambda _, p: ask(p), required=True)
    return answers


def _ask_all(
    participants: Sequence[P], ask: Callable[[int, P], T]
) -> list[T | RefusedError]:
    """Call ``ask`` for every participant concurrently; refusals are returned, not raised."""

    def one(index: int, participant: P) -> T | RefusedError:
        try:
            return ask(index, participant)
        except RefusedError as exc:
            return exc

    if len(participants) <= 1:
        return [one(i, p) for i, p in enumerate(participants)]
    with ThreadPoolExecutor(max_workers=min(len(participants), 64)) as pool:
        futures = [pool.submit(one, i, p) for i, p in enumerate(participants)]
        return [f.result() for f in futures]
