"""A participant's local policy: what it will ever compute for a coordinator.

The policy is the organisation's, not the coordinator's: a request outside it is refused
with :class:`core.errors.RefusedError` and a reason the coordinator can show. Every such
reason is a function of the job and of this public policy (with the bounds it declares,
``protocol.maths.declaration``), never of the rows: a refusal that depended on the rows would
answer a yes/no question about them.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from typing import Annotated, Final, Literal, Self, TypeVar, get_args

from pydantic import AfterValidator, ConfigDict, Field, model_validator
from pydantic import dataclasses as pydantic_dataclasses

from fedclust.core.errors import RefusedError
from fedclust.core.models import Identifier
from fedclust.core.validation import FloatArray
from fedclust.protocol import algorithms
from fedclust.protocol.maths.declaration import (
    Declaration,
    is_power_of_two,
    row_bucket,
    value_bucket,
)
from fedclust.protocol.wire.messages import ProtectionScheme

RosterRule = Literal["any", "fixed", "min_difference"]
ROSTER_RULES: Final[tuple[RosterRule, ...]] = ("any", "fixed", "min_difference")
RosterMembers = Literal["any", "known"]
ROSTER_MEMBERS: Final[tuple[RosterMembers, ...]] = ("any", "known")
#: Every protection a job can declare (``protocol.wire.messages.ProtectionScheme``).
PROTECTIONS: Final[frozenset[str]] = frozenset(get_args(ProtectionScheme))
#: The protections an agent accepts unless its organisation opts in to "none" (the papers'
#: unprotected protocol, where each participant's statistics reach the coordinator).
DEFAULT_PROTECTIONS: Final[frozenset[str]] = frozenset({"masking", "paillier"})

#: What the keys of ``[policy]`` must be: :class:`Policy`'s rules, which the table
#: (``participant.config.PolicyTable``) shares.
ROW_BOUND_TEXT: Final = '"auto" or a power of two R (1, 2, 4, ...) declaring R/2 < rows <= R'
VALUE_BOUND_TEXT: Final = '"auto" or a number B > 0 declaring |x| <= B for every raw value'
PROTECTIONS_TEXT: Final = (
    "a non-empty list of protections among "
    f"{', '.join(repr(p) for p in sorted(PROTECTIONS))} (\"none\" only to take part in "
    "unprotected jobs, whose statistics reach the coordinator in the clear)"
)
MinClusterSize = Annotated[int, Field(ge=1)]
MaxRounds = Annotated[int, Field(ge=1)]
RosterMinDifference = Annotated[int, Field(ge=2)]

Names = TypeVar("Names", bound=Collection[str])


def check_row_bound(bound: int) -> int:
    """A declared row bound: a power of two R declares R/2 < rows <= R
    (``protocol.maths.declaration``)."""
    if not is_power_of_two(bound):
        raise ValueError(f"[policy] row_bound must be {ROW_BOUND_TEXT}.")
    return bound


def check_value_bound(bound: float) -> float:
    """A declared value bound: a finite B > 0 declares |x| <= B for every raw value."""
    if not (math.isfinite(bound) and bound > 0):
        raise ValueError(f"[policy] value_bound must be {VALUE_BOUND_TEXT}.")
    return bound


def check_algorithms(names: Names) -> Names:
    """Names of the registry (``protocol.algorithms``), at least one."""
    known = algorithms.names()
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(
            "[policy] allowed_algorithms has unknown algorithm(s) "
            f"{', '.join(repr(n) for n in unknown)}; known: {', '.join(sorted(known))}."
        )
    if not names:
        raise ValueError("[policy] allowed_algorithms must name at least one algorithm.")
    return names


def check_protections(names: Names) -> Names:
    """Protections a job may declare (:data:`PROTECTIONS`), at least one."""
    if not names or not set(names) <= PROTECTIONS:
        raise ValueError(f"[policy] protections must be {PROTECTIONS_TEXT}.")
    return names


@pydantic_dataclasses.dataclass(frozen=True, config=ConfigDict(hide_input_in_errors=True))
class Policy:
    """Local privacy rules.

    Attributes:
        allowed_algorithms: algorithms this participant takes part in.
        min_cluster_size: p of Garst & Reinders: smaller clusters are never reported (2).
        enforce_fcm_rule: refuse exact-sum FCM when N <= C(F+1)/F (Corcuera Bárcena et al.
            §4.2).
        max_rounds: the most rounds of one run this participant answers.
        row_bound: declared bucket R (a power of two, R/2 < N_l <= R); None: from the rows.
        value_bound: declared bound B on every raw |x|; None: from the rows (the power of two
            at or above max|x|, at least 1).
        rosters: the roster rule of :meth:`require_roster`: "any", "fixed" (only
            ``accepted_rosters``) or "min_difference" (default: no symmetric difference of
            1 to ``roster_min_difference`` - 1 with a roster joined before).
        accepted_rosters: the rosters of rule "fixed".
        roster_min_difference: the smallest nonzero difference accepted (>= 2; default 3).
        roster_members: "any" (default) or "known": every other member in ``known_peers``.
        known_peers: the organisations of the ``[peers]`` table (keys pinned, ``PeerPins``).
        protections: accepted job protections (default "masking" and "paillier").

    Every rule is checked when a policy is built, from the ``[policy]`` table or directly.

    Design notes: ``docs/participant-config.md`` (§ The local policy).
    """

    allowed_algorithms: Annotated[frozenset[str], AfterValidator(check_algorithms)] = Field(
        default_factory=lambda: frozenset(algorithms.names())
    )
    min_cluster_size: MinClusterSize = 2
    enforce_fcm_rule: bool = True
    max_rounds: MaxRounds = 1000
    row_bound: Annotated[int, AfterValidator(check_row_bound)] | None = None
    value_bound: Annotated[float, AfterValidator(check_value_bound)] | None = None
    rosters: RosterRule = "min_difference"
    accepted_rosters: frozenset[Annotated[frozenset[Identifier], Field(min_length=1)]] = (
        frozenset()
    )
    roster_min_difference: RosterMinDifference = 3
    roster_members: RosterMembers = "any"
    known_peers: frozenset[str] = frozenset()
    protections: Annotated[frozenset[str], AfterValidator(check_protections)] = (
        DEFAULT_PROTECTIONS
    )

    @model_validator(mode="after")
    def _rosters(self) -> Self:
        if (self.rosters == "fixed") != bool(self.accepted_rosters):
            raise ValueError(
                "[policy] accepted_rosters (a list of lists of participant ids) is needed with "
                'rosters = "fixed", and only then.'
            )
        if self.roster_members == "known" and not self.known_peers:
            raise ValueError(
                '[policy] roster_members = "known" needs the organisations this participant '
                "knows: list them with their identity keys in the [peers] table."
            )
        return self

    def declare(self, X: FloatArray) -> Declaration:
        """The declaration of the raw rows ``X`` (configured bounds checked, others derived).

        Raises:
            ValueError: ``X`` does not satisfy a configured bound — a local configuration
                error naming the key, never sent to a coordinator.
        """
        largest = max(float(X.max()), -float(X.min())) if X.size else 0.0  # no |X| copy
        return self.declare_extent(int(X.shape[0]), largest)

    def declare_extent(self, n_rows: int, largest: float) -> Declaration:
        """:meth:`declare` from the row count and the largest |value| (of streamed rows)."""
        row_bound = row_bucket(n_rows) if self.row_bound is None else self.row_bound
        if not row_bound // 2 < n_rows <= row_bound:
            raise ValueError(
                f"[policy] row_bound = {row_bound} declares {row_bound // 2 + 1} to "
                f"{row_bound} rows, but the data's row count lies outside that bucket; set "
                "it to the power of two at or above the row count, or remove it to derive it."
            )
        value_bound = value_bucket(largest) if self.value_bound is None else self.value_bound
        if largest > value_bound:
            raise ValueError(
                f"[policy] value_bound = {value_bound!r} is below the magnitude of a value in "
                "the data; raise it, or remove it to derive it."
            )
        return Declaration(
            row_bound=row_bound, value_bound=value_bound,
            row_bound_derived=self.row_bound is None,
            value_bound_derived=self.value_bound is None,
            enforces_fcm_rule=self.enforce_fcm_rule,
        )

    def require_roster(
        self, roster: frozenset[str], joined: Iterable[frozenset[str]], *, me: str
    ) -> None:
        """Refuse a job roster the roster rule forbids, given the rosters joined before (and,
        with ``roster_members = "known"``, a roster with members other than ``me`` that are
        not known peers).

        The reason names rosters, participant ids and public numbers only.
        """
        unknown = roster - self.known_peers - {me}
        if self.roster_members == "known" and unknown:
            raise RefusedError(
                f"the job's roster names {roster_text(unknown)}, not among the organisations "
                "this participant knows (roster_members = 'known': its [peers]); members it "
                "does not know could be the coordinator's own, isolating it: refused."
            )
        if self.rosters == "fixed" and roster not in self.accepted_rosters:
            raise RefusedError(
                f"the job's roster {roster_text(roster)} is not one of the rosters this "
                "participant's policy accepts (rosters = 'fixed'): refused."
            )
        if self.rosters != "min_difference":
            return
        for other in joined:
            difference = len(roster ^ other)
            if 0 < difference < self.roster_min_difference:
                raise RefusedError(
                    f"the job's roster {roster_text(roster)} differs from the roster "
                    f"{roster_text(other)} of a job this participant joined by {difference} "
                    f"participant(s), fewer than its roster_min_difference="
                    f"{self.roster_min_difference}: totals over the two rosters would reveal "
                    "the differing participants' statistics by difference; refused."
                )

    def require_protection(self, protection: str) -> None:
        """Refuse a job whose declared protection this policy does not accept."""
        if protection not in self.protections:
            accepted = ", ".join(sorted(self.protections))
            raise RefusedError(
                f"the job declares protection {protection!r}, which this participant's "
                f"policy does not accept (protections: {accepted}): refused."
            )

    def require(self, algorithm: str, *others: str) -> None:
        """Refuse unless the policy allows ``algorithm`` (or one of ``others``: what asks a
        statistic several algorithms ask)."""
        if self.allowed_algorithms.isdisjoint((algorithm, *others)):
            allowed = ", ".join(sorted(self.allowed_algorithms))
            named = (f"algorithm {algorithm!r} is not" if not others else
                     f"none of the algorithms {', '.join(map(repr, (algorithm, *others)))} is")
            raise RefusedError(
                f"{named} allowed by this participant's policy (allowed: {allowed})."
            )

    def require_round(self, round_number: int) -> None:
        """Refuse a round beyond the policy's maximum."""
        if round_number > self.max_rounds:
            raise RefusedError(
                f"round {round_number} exceeds this participant's max_rounds={self.max_rounds}."
            )


def accepting(protection: str) -> frozenset[str]:
    """The protections of a participant whose organisation is the user running the job (the
    simulator, the demo, the in-process service): the default ones and the job's own."""
    return DEFAULT_PROTECTIONS | {protection}


def roster_text(roster: Iterable[str]) -> str:
    """A roster as refusal reasons name it: its ids sorted, ``[a, b, c]``."""
    return "[" + ", ".join(sorted(roster)) + "]"
