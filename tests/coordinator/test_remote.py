"""The wire path without HTTP: every task and reply crosses as JSON, results stay identical.

A loopback channel serialises each task, lets ``participant.dispatch.execute`` answer it on
a :class:`LocalParticipant`, and serialises the contribution back. The job run over
:class:`RemoteParticipant` proxies must equal the in-process simulator bit for bit, and no
body that reaches the coordinator may carry a participant's N_l.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from fedclust.coordinator.job import result_document, run_job
from fedclust.coordinator.remote import RemoteParticipant
from fedclust.core.errors import RefusedError
from fedclust.data import synthetic
from fedclust.data.federations import Federation
from fedclust.participant.dispatch import execute
from fedclust.participant.local import LocalParticipant
from fedclust.participant.policy import Policy
from fedclust.protocol.wire import messages as msg
from fedclust.simulate import CountingService, simulate


class LoopbackChannel:
    """A TaskChannel that round-trips every message through its JSON wire form."""

    def __init__(self, locals_: dict[str, LocalParticipant], algorithm: msg.Algorithm) -> None:
        self._locals = locals_
        self._algorithm = algorithm
        self._next: dict[str, int] = {}
        self.received: list[str] = []  # contribution bodies, as the coordinator receives them
        self.asked: list[str] = []  # what each task computed (msg.task_name)

    def ask(self, participant: str, spec: msg.TaskSpec) -> msg.Reply:
        task_id = self._next.get(participant, 0)
        self._next[participant] = task_id + 1
        task = msg.Task(job_id="job-1", task_id=task_id, algorithm=self._algorithm, spec=spec)
        wire_task = msg.Task.model_validate_json(task.model_dump_json())
        reply = execute(self._locals[participant], wire_task)
        body = msg.Contribution(job_id="job-1", task_id=task_id, reply=reply).model_dump_json()
        self.received.append(body)
        self.asked.append(msg.task_name(spec))
        contribution = msg.Contribution.model_validate_json(body)
        msg.check_reply(spec, contribution.reply, self._locals[participant].n_features)
        return contribution.reply


def federation() -> Federation:
    return Federation.from_pairs("motivational", synthetic.motivational(seed=4))


def run_over_wire(
    algorithm: msg.Algorithm, spec_kwargs: dict[str, Any], policy: Policy | None = None
) -> tuple[msg.ResultDocument, LoopbackChannel, list[int]]:
    fed = federation()
    names = [f"participant-{i}" for i in range(len(fed.parts))]
    spec = msg.JobCreate(
        algorithm=algorithm, participants=names, **({"protection": "none"} | spec_kwargs)
    )
    counter = CountingService(names)
    locals_ = {
        name: LocalParticipant(X, name=name, policy=policy, count_sink=counter.report)
        for name, X in zip(names, fed.parts, strict=True)
    }
    channel = LoopbackChannel(locals_, algorithm)
    remotes = [RemoteParticipant(n, channel=channel, n_features=2) for n in names]
    outcome = run_job(remotes, spec, total_count=counter.total)
    return result_document(outcome, spec), channel, [len(X) for X in fed.parts]


@pytest.mark.parametrize(
    "algorithm", ["ffcm", "fedfcm", "fedfcm-avg", "fkm", "kfed", "kfed-dennis"]
)
def test_wire_run_equals_the_simulator(algorithm: msg.Algorithm) -> None:
    kwargs: dict[str, Any] = {"k_range": (3, 5), "seed": 11, "standardise": True,
                              "local_k_range": (2, 3)}
    wire, _, _ = run_over_wire(algorithm, kwargs)
    sim = simulate(federation(), algorithm=algorithm, ks=range(3, 6), seed=11,
                   standardise=True, local_ks=range(2, 4), protection="none").to_document()
    # Exact equality: the same functions on the same bits (float64 crosses the wire exactly).
    assert wire.model_dump(exclude={"dataset"}) == sim.model_dump(exclude={"dataset", "sweep"}) | {
        "sweep": [e.model_dump() | {"ari": None, "client_weighted_ari": None} for e in sim.sweep]
    }


def _ints(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, dict):
        return [i for v in value.values() for i in _ints(v)]
    if isinstance(value, list):
        return [i for v in value for i in _ints(v)]
    return []


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_no_body_reaching_the_coordinator_carries_an_n_l() -> None:
    doc, channel, sizes = run_over_wire(
        "fedfcm", {"k_range": (2, 6), "seed": 0, "standardise": True, "local_k_range": (2, 5)}
    )
    assert doc.k_selected == 5
    bodies = [json.loads(b) for b in channel.received]
    kinds = {b["reply"]["kind"] for b in bodies}
    assert {"statistic", "ack"} <= kinds
    assert {"moment_sums", "fuzzy_db_sums", "silhouette_sums"} <= set(channel.asked)
    for body in bodies:
        assert not _keys(body) & {"count", "counts", "n", "n_samples", "size"}
        assert not set(_ints(body)) & set(sizes), body["reply"]["kind"]
        for field in body["reply"].values():
            if isinstance(field, dict) and field.get("dtype") == "int64":
                array = msg.WireArray.model_validate(field).to_numpy()
                assert not set(array.ravel().tolist()) & set(sizes)


def test_a_refusal_crosses_the_wire_with_its_reason() -> None:
    with pytest.raises(RefusedError, match="'ffcm' is not allowed"):
        run_over_wire("ffcm", {"k": 3, "seed": 0}, Policy(allowed_algorithms=frozenset({"fkm"})))


def test_a_reply_of_the_wrong_shape_is_refused_before_use() -> None:
    spec = msg.StatisticTask.of("fcm_sums", np.zeros((3, 2)), m=2.0)
    bad = msg.StatisticReply(fields={"u_sum": msg.WireArray.of(np.ones(2)),
                                     "weighted_sum": msg.WireArray.of(np.ones((3, 2)))})
    with pytest.raises(ValueError, match=r"'u_sum' must be float64 of shape \(3,\); got float64 "
                       r"of shape \(2,\)"):
        msg.check_reply(spec, bad, n_features=2)
    with pytest.raises(ValueError, match="needs a 'statistic' reply"):
        msg.check_reply(spec, msg.AckReply(), n_features=2)
