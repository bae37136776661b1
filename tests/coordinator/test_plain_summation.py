"""Protection "none" as a summation: the participants' replies added in the clear, with the
same refusal and dropout rules as the drivers' other summations."""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.coordinator.secure_sum import PlainSummation
from fedclust.core.errors import RefusedError, UnavailableError
from fedclust.participant.local import LocalParticipant
from fedclust.protocol.wire import messages as msg

CENTERS = np.array([[0.0, 0.0], [3.0, 3.0]])
TASK = msg.StatisticTask.of("fcm_sums", msg.WireArray.of(CENTERS), m=2.0)


class Silent(LocalParticipant):
    """A participant that has stopped answering (as a remote one whose task timed out)."""

    dropped: str | None = None

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        self.dropped = "did not answer in time"
        raise UnavailableError(f"participant {self.name!r} did not answer in time")


class Refusing(LocalParticipant):
    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        raise RefusedError("not today")


def _parts(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.normal(size=(20 + i, 2)) for i in range(n)]


def test_the_total_is_the_sum_of_the_replies_in_order() -> None:
    locals_ = [LocalParticipant(X, name=f"p{i}") for i, X in enumerate(_parts(4))]
    total, names = PlainSummation().sum(locals_, TASK, msg.StatisticReply)
    parts = [p.statistic("fcm_sums", CENTERS, {"m": 2.0}) for p in locals_]
    expected_u = parts[0]["u_sum"]
    expected_ws = parts[0]["weighted_sum"]
    for part in parts[1:]:
        expected_u, expected_ws = expected_u + part["u_sum"], expected_ws + part["weighted_sum"]
    result = {name: value.to_numpy() for name, value in total.fields.items()}
    assert names == ("p0", "p1", "p2", "p3")
    np.testing.assert_array_equal(result["u_sum"], expected_u)  # the same additions, bit for bit
    np.testing.assert_array_equal(result["weighted_sum"], expected_ws)


def test_a_refusal_is_left_out_and_noted_once_unless_required() -> None:
    X = _parts(3)
    members = [LocalParticipant(X[0], name="a"), Refusing(X[1], name="b"),
               LocalParticipant(X[2], name="c")]
    plain = PlainSummation()
    for _ in range(2):
        _, names = plain.sum(members, TASK, msg.StatisticReply)
        assert names == ("a", "c")
    assert plain.notes == ["participant 'b' refused: not today"]
    with pytest.raises(RefusedError, match="participant 'b' refused: not today"):
        plain.sum(members, TASK, msg.StatisticReply, required=True)
    with pytest.raises(RefusedError, match="every participant asked refused"):
        plain.sum(members[1:2], TASK, msg.StatisticReply)


def test_a_participant_that_does_not_answer_is_left_out_of_every_later_sum() -> None:
    X = _parts(3)
    silent = Silent(X[1], name="b")
    members = [LocalParticipant(X[0], name="a"), silent, LocalParticipant(X[2], name="c")]
    plain = PlainSummation()
    _, names = plain.sum(members, TASK, msg.StatisticReply)
    assert names == ("a", "c") and silent.dropped is not None
    _, names = plain.sum(members, TASK, msg.StatisticReply)
    assert names == ("a", "c")
    assert len(plain.notes) == 1 and plain.notes[0].startswith("participant 'b' dropped out")
    assert not plain.protected and plain.cohorts is None
