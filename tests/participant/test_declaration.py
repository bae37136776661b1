"""A participant's declared bounds: derived or configured, checked at load, parsed from the
[policy] table, and the only ground of its size refusals (exact FCM) and roster rule."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fedclust.core.errors import RefusedError
from fedclust.participant.agent import run_agent
from fedclust.participant.config import ParticipantConfig
from fedclust.participant.local import LocalParticipant
from fedclust.participant.policy import Policy
from fedclust.protocol.wire.messages import JobCreate
from tests.participant.test_agent import blobs, write_config, write_rows

HEAD = (
    '[participant]\nid = "a"\ncoordinator_url = "http://c"\ncounting_url = "http://n"\n'
    'token = "t"\n[data]\npath = "rows.csv"\n'
)


def rows(n: int, scale: float = 1.0, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-scale, scale, size=(n, 2))


def test_derived_bounds_are_the_buckets_of_the_data_and_marked_derived() -> None:
    declaration = Policy().declare(rows(40, scale=3.0))
    assert (declaration.row_bound, declaration.value_bound) == (64, 4.0)
    assert declaration.row_bound_derived and declaration.value_bound_derived
    assert declaration.enforces_fcm_rule
    assert declaration.describe_rows() == "row_bound=64 (33 to 64 rows)"


def test_configured_bounds_are_checked_against_the_data() -> None:
    declaration = Policy(row_bound=64, value_bound=10.0).declare(rows(40, scale=3.0))
    assert (declaration.row_bound, declaration.value_bound) == (64, 10.0)
    assert not declaration.row_bound_derived and not declaration.value_bound_derived
    with pytest.raises(ValueError, match=r"\[policy\] row_bound = 32 declares 17 to 32 rows"):
        Policy(row_bound=32).declare(rows(40))
    with pytest.raises(ValueError, match=r"\[policy\] row_bound = 128 .*outside that bucket"):
        Policy(row_bound=128).declare(rows(40))  # the lower edge must hold too
    with pytest.raises(ValueError, match=r"\[policy\] value_bound = 2.0 is below") as info:
        Policy(value_bound=2.0).declare(rows(40, scale=3.0))
    assert "40" not in str(info.value)
    with pytest.raises(ValueError, match="power of two"):
        Policy(row_bound=48)


def test_the_exact_fcm_refusal_depends_on_the_bucket_not_on_the_rows() -> None:
    # N = 39 and N = 59 share the bucket 64 (33 to 64 rows). The paper's rule on N would
    # refuse K = 27 at N = 39 (78 <= 81) and answer at N = 59; on the bucket both refuse.
    small, large = LocalParticipant(rows(39), name="a"), LocalParticipant(rows(59), name="a")
    centers = np.zeros((27, 2))
    reasons = []
    for part in (small, large):
        with pytest.raises(RefusedError, match="privacy rule of Corcuera Bárcena") as info:
            part.statistic("fcm_sums", centers, {"m": 2.0})
        reasons.append(str(info.value))
    assert reasons[0] == reasons[1]
    assert re.search(r"\b(39|59)\b", reasons[0]) is None
    for part in (small, large):  # K = 21, the largest the lower edge allows, is answered
        assert part.statistic("fcm_sums", np.zeros((21, 2)), {"m": 2.0})["u_sum"].shape == (21,)


def test_the_declaration_names_the_roster_it_is_for() -> None:
    part = LocalParticipant(rows(10), name="a")

    def terms(*roster: str) -> JobCreate:
        return JobCreate(algorithm="ffcm", participants=list(roster), k=2)

    assert part.declare(terms("a", "b", "c")) == part.declaration
    with pytest.raises(RefusedError, match="not on the job's roster"):
        part.declare(terms("b", "c", "d"))


@pytest.mark.parametrize(
    ("rule", "joined", "roster", "refused"),
    [
        ("min_difference", [{"a", "b", "c"}], {"a", "b", "c"}, False),  # identical
        ("min_difference", [{"a", "b", "c"}], {"a", "b", "c", "d"}, True),  # one more
        ("min_difference", [{"a", "b", "c", "d"}], {"a", "b", "c"}, True),  # one fewer
        ("min_difference", [{"a", "b", "c", "d"}], {"a", "b", "e", "d"}, True),  # swap: 2
        ("min_difference", [{"a", "b", "c"}], {"a", "d", "e", "f"}, False),  # 5 apart
        ("any", [{"a", "b", "c"}], {"a", "b", "c", "d"}, False),
        ("fixed", [], {"a", "b", "c", "d"}, True),
        ("fixed", [], {"a", "b", "c"}, False),
    ],
    ids=["same", "plus-one", "minus-one", "swap", "far", "any", "fixed-other", "fixed-listed"],
)
def test_the_roster_rule(
    rule: str, joined: list[set[str]], roster: set[str], refused: bool
) -> None:
    accepted = frozenset({frozenset("abc")}) if rule == "fixed" else frozenset()
    policy = Policy(rosters=rule, accepted_rosters=accepted)  # type: ignore[arg-type]
    history = [frozenset(r) for r in joined]
    if not refused:
        policy.require_roster(frozenset(roster), history, me="a")
        return
    with pytest.raises(RefusedError, match=r"the job's roster \[a, b, ") as info:
        policy.require_roster(frozenset(roster), history, me="a")
    if rule == "min_difference":  # the rosters and the size of their difference, all public
        difference = len(frozenset(roster) ^ history[0])
        assert f"from the roster {_text(history[0])}" in str(info.value)
        assert f"by {difference} participant(s)" in str(info.value)


def _text(roster: frozenset[str]) -> str:
    return "[" + ", ".join(sorted(roster)) + "]"


def test_policy_table_reads_bounds_and_roster_rule(tmp_path: Path) -> None:
    file = tmp_path / "p.toml"
    file.write_text(
        HEAD + '[policy]\nrow_bound = 64\nvalue_bound = 2.5\nrosters = "fixed"\n'
        'accepted_rosters = [["a", "b", "c"]]\n'
    )
    policy = ParticipantConfig.from_file(file).policy
    assert (policy.row_bound, policy.value_bound, policy.rosters) == (64, 2.5, "fixed")
    assert policy.accepted_rosters == frozenset({frozenset({"a", "b", "c"})})
    file.write_text(HEAD + '[policy]\nrow_bound = "auto"\nroster_min_difference = 4\n')
    policy = ParticipantConfig.from_file(file).policy
    assert policy.row_bound is None and policy.value_bound is None
    assert (policy.rosters, policy.roster_min_difference) == ("min_difference", 4)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("row_bound = 48\n", r"row_bound must be \"auto\" or a power of two"),
        ("value_bound = -1\n", r"value_bound must be \"auto\" or a number B > 0"),
        ('rosters = "some"\n', "rosters must be one of any, fixed, min_difference"),
        ('rosters = "fixed"\n', "accepted_rosters .* is needed with"),
        ("accepted_rosters = [[\"a\"]]\n", "accepted_rosters .* is needed with"),
        ("roster_min_difference = 1\n", "roster_min_difference must be >= 2"),
    ],
    ids=["row-bound", "value-bound", "rule", "fixed-without-list", "list-without-fixed",
         "difference"],
)
def test_policy_table_errors_name_the_key(tmp_path: Path, table: str, message: str) -> None:
    file = tmp_path / "p.toml"
    file.write_text(HEAD + "[policy]\n" + table)
    with pytest.raises(ValueError, match=message) as info:
        ParticipantConfig.from_file(file)
    assert str(info.value).startswith(str(file))


def test_the_agent_refuses_to_start_on_data_its_declaration_does_not_fit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_rows(tmp_path, blobs())  # 137 rows: bucket 256
    policy = "[policy]\nrow_bound = 128\n"
    config = ParticipantConfig.from_file(write_config(tmp_path, policy=policy))
    with pytest.raises(ValueError, match=r"rows\.csv: \[policy\] row_bound = 128 declares 65 to"):
        run_agent(config)  # a local configuration error: nothing was sent (no transport)
    assert "137" not in caplog.text
