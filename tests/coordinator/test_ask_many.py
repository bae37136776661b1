"""A round's tasks through the broker at once (``Broker.ask_many``): one waiting thread for
every participant's reply, timeouts, a cancel, replay on resume, and the round drivers'
gathering over it (``coordinator._rounds.answer_each``), the one-shot stages' included."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from fedclust.coordinator._rounds import Gatherer
from fedclust.coordinator.broker import (
    Broker,
    ContributionRejectedError,
    JobCancelledError,
    JobChannel,
    TaskTimeoutError,
)
from fedclust.coordinator.db import Database, JobRecord
from fedclust.coordinator.declarations import declare_job
from fedclust.coordinator.distill_job import run_distill_job
from fedclust.coordinator.fedcref_job import run_fedcref_job
from fedclust.coordinator.federated_kmeans import run_kfed
from fedclust.coordinator.remote import RemoteParticipant
from fedclust.coordinator.secure_sum import PlainSummation
from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.protocol.algorithms.fed_distill_params import DistillParams
from fedclust.protocol.algorithms.fedcref_params import FedCRefParams
from fedclust.protocol.wire import messages as msg
from tests.coordinator.test_fedcref import StandIn

T = TypeVar("T")
NAMES = ["p0", "p1", "p2"]
CENTERS = np.array([[0.0, 1.0], [2.0, 3.0]])
FCM = msg.StatisticTask.of("fcm_sums", CENTERS, m=2.0)


def _sums(i: int) -> msg.StatisticReply:
    """Participant i's FCM sums: u_sum = (i+1, i+1), weighted_sum all i+1."""
    return msg.StatisticReply(fields={
        "u_sum": msg.WireArray.of(np.full(2, i + 1.0)),
        "weighted_sum": msg.WireArray.of(np.full((2, 2), i + 1.0)),
    })


def _reply_sums(i: int, _: msg.Task) -> msg.Reply:
    return _sums(i)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'c.db'}")
    database.create_all()
    yield database
    database.dispose()


def _job(db: Database, job_id: str = "job-r") -> JobRecord:
    spec = msg.JobCreate(algorithm="ffcm", participants=NAMES, k=2, protection="none")
    return db.create_job(job_id, spec, n_features=2)


def _answer(broker: Broker, name: str, reply: Callable[[msg.Task], msg.Reply]) -> msg.Task:
    """Wait for ``name``'s next task and submit ``reply(task)`` to it."""
    deadline = time.monotonic() + 30
    while (body := broker.poll(name, blobs=False)) is None:
        assert time.monotonic() < deadline, f"no task reached {name}"
        time.sleep(0.005)
    task = msg.Task.model_validate_json(body)
    broker.submit(name, msg.Contribution(job_id=task.job_id, task_id=task.task_id,
                                         reply=reply(task)))
    return task


def _waiting(broker: Broker) -> list[str]:
    progress = broker.progress("job-r")
    return [] if progress is None else progress.waiting_for


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def _in_thread(fn: Callable[[], T]) -> Future[T]:
    pool = ThreadPoolExecutor(1)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future


def test_every_reply_comes_back_in_order_to_one_waiting_thread(db: Database) -> None:
    broker = Broker(db, timeout=30.0)
    channel = broker.open_job(_job(db))
    asked = _in_thread(lambda: channel.ask_many([(n, FCM) for n in NAMES]))
    _wait_for(lambda: _waiting(broker) == NAMES)
    for i, name in reversed(list(enumerate(NAMES))):  # answered out of order
        task = _answer(broker, name, functools.partial(_reply_sums, i))
        assert task.task_id == 0 and task.spec == FCM
    replies = asked.result(timeout=30)
    assert replies == [_sums(i) for i in range(len(NAMES))]
    progress = broker.progress("job-r")
    assert progress is not None and progress.waiting_for == []
    assert sorted(progress.answered) == NAMES
    broker.close_job("job-r")
    broker.close()


def test_a_round_at_different_task_ids_serves_each_task_its_own_id(db: Database) -> None:
    """The tasks of a round share their served form per spec and task id: a participant
    asked once more before gets the same spec under its own next id."""
    broker = Broker(db, timeout=30.0)
    channel = broker.open_job(_job(db))
    first = _in_thread(lambda: channel.ask_many([("p0", FCM)]))
    assert _answer(broker, "p0", functools.partial(_reply_sums, 0)).task_id == 0
    first.result(timeout=30)
    asked = _in_thread(lambda: channel.ask_many([(n, FCM) for n in NAMES]))
    tasks = [_answer(broker, name, functools.partial(_reply_sums, i))
             for i, name in enumerate(NAMES)]
    assert [t.task_id for t in tasks] == [1, 0, 0]
    assert all(t.spec == FCM and t.job_id == "job-r" for t in tasks)
    assert asked.result(timeout=30) == [_sums(i) for i in range(len(NAMES))]
    broker.close_job("job-r")
    assert sorted((t.participant, t.task_id) for t in db.tasks("job-r")) == [
        ("p0", 0), ("p0", 1), ("p1", 0), ("p2", 0)
    ]
    broker.close()


def test_a_participant_that_does_not_answer_times_out_alone(db: Database) -> None:
    broker = Broker(db, timeout=0.5)
    channel = broker.open_job(_job(db))
    asked = _in_thread(lambda: channel.ask_many([(n, FCM) for n in NAMES]))
    for i in (0, 2):
        _answer(broker, NAMES[i], functools.partial(_reply_sums, i))
    replies = asked.result(timeout=30)
    reason = "participant 'p1' did not answer task 0 (fcm_sums) within 0.5 s"
    assert replies[0] == _sums(0) and replies[2] == _sums(2)
    assert isinstance(replies[1], TaskTimeoutError) and str(replies[1]) == reason
    assert broker.poll("p1", blobs=False) is None  # withdrawn
    with pytest.raises(ContributionRejectedError) as late:
        broker.submit("p1", msg.Contribution(job_id="job-r", task_id=0, reply=_sums(1)))
    assert late.value.status_code == 409
    broker.close_job("job-r")
    assert [t.timed_out for t in db.tasks("job-r") if t.participant == "p1"] == [reason]
    broker.close()


def test_a_cancel_wakes_the_waiting_round_at_once(db: Database) -> None:
    broker = Broker(db, timeout=60.0)
    channel = broker.open_job(_job(db))
    asked = _in_thread(lambda: channel.ask_many([(n, FCM) for n in NAMES]))
    _answer(broker, NAMES[0], lambda _: _sums(0))
    _wait_for(lambda: _waiting(broker) == NAMES[1:])
    broker.cancel("job-r")
    with pytest.raises(JobCancelledError):  # before the broker's 60 s timeout
        asked.result(timeout=30)
    assert all(broker.poll(n, blobs=False) is None for n in NAMES)  # nothing handed out
    broker.close_job("job-r")
    broker.close()


def test_a_resumed_round_replays_its_stored_replies_and_timeouts(db: Database) -> None:
    job = _job(db)
    first = Broker(db, timeout=0.5)
    channel = first.open_job(job)
    asked = _in_thread(lambda: channel.ask_many([(n, FCM) for n in NAMES]))
    _answer(first, "p0", lambda _: _sums(0))
    _answer(first, "p2", lambda _: msg.RefusalReply(reason="not today"))
    original = asked.result(timeout=30)
    first.close_job("job-r")
    first.close()

    restarted = Broker(db, timeout=60.0)
    replay = restarted.open_job(job)
    stored = len(db.tasks("job-r"))
    again = replay.ask_many([(n, FCM) for n in NAMES])
    assert len(db.tasks("job-r")) == stored  # nothing asked again: p1's timeout is replayed
    assert again[0] == original[0] == _sums(0)
    assert again[2] == original[2] == msg.RefusalReply(reason="not today")
    assert isinstance(again[1], TaskTimeoutError) and str(again[1]) == str(original[1])
    assert all(restarted.poll(n, blobs=False) is None for n in NAMES)
    restarted.close_job("job-r")
    restarted.close()

    changed = Broker(db, timeout=60.0)  # a resumed job must ask what it asked before
    other = msg.StatisticTask.of("fcm_sums", msg.WireArray.of(CENTERS + 1.0), m=2.0)
    with pytest.raises(ProtocolError, match="task 0 of participant 'p0' differs"):
        changed.open_job(job).ask_many([("p0", other), ("p1", FCM)])
    changed.close()


def _remotes(channel: JobChannel) -> list[RemoteParticipant]:
    return [RemoteParticipant(n, channel=channel, n_features=2) for n in NAMES]


def test_a_plain_sum_over_the_broker_leaves_out_a_refusal_and_a_dropout(db: Database) -> None:
    broker = Broker(db, timeout=0.5)
    remotes = _remotes(broker.open_job(_job(db)))
    summation = PlainSummation()
    before = {t.ident for t in threading.enumerate()}
    asked = _in_thread(lambda: summation.sum(remotes, FCM, msg.StatisticReply))
    _wait_for(lambda: _waiting(broker) == NAMES)  # every task is out
    started = {t.ident for t in threading.enumerate()} - before
    assert len(started) == 1  # the asking thread; no thread per participant
    _answer(broker, "p0", lambda _: _sums(0))
    _answer(broker, "p2", lambda _: msg.RefusalReply(reason="policy says no"))
    total, names = asked.result(timeout=30)
    assert names == ("p0",)
    assert total == _sums(0)
    assert remotes[1].dropped is not None and remotes[0].dropped is remotes[2].dropped is None
    assert summation.notes == [
        f"participant 'p1' dropped out ({remotes[1].dropped}); left out of the later rounds",
        "participant 'p2' refused: policy says no",
    ]
    # the next sum does not ask p1 again
    asked = _in_thread(lambda: summation.sum(remotes, FCM, msg.StatisticReply))
    _answer(broker, "p0", lambda _: _sums(0))
    _answer(broker, "p2", lambda _: _sums(2))
    total, names = asked.result(timeout=30)
    assert names == ("p0", "p2")
    assert np.array_equal(total.fields["u_sum"].to_numpy(), np.full(2, 4.0))
    assert [t.task_id for t in db.tasks("job-r") if t.participant == "p1"] == [0]
    broker.close_job("job-r")
    broker.close()


def test_a_required_round_fails_on_a_refusal_and_a_fatal_refusal_stops_the_job(
    db: Database,
) -> None:
    broker = Broker(db, timeout=30.0)
    remotes = _remotes(broker.open_job(_job(db)))

    def gather() -> tuple[list[msg.Reply], tuple[str, ...]]:
        return Gatherer().gather_replies(
            0, remotes, lambda _, p: FCM, lambda p, r: r, required=True
        )

    asked = _in_thread(gather)
    _answer(broker, "p0", lambda _: _sums(0))
    _answer(broker, "p1", lambda _: msg.RefusalReply(reason="no"))
    _answer(broker, "p2", lambda _: _sums(2))
    with pytest.raises(RefusedError, match="participant 'p1' refused: no"):
        asked.result(timeout=30)
    asked = _in_thread(gather)
    _answer(broker, "p0", lambda _: msg.RefusalReply(reason="bounds broken", fatal=True))
    _answer(broker, "p1", lambda _: _sums(1))
    _answer(broker, "p2", lambda _: _sums(2))
    with pytest.raises(ProtocolError, match="participant 'p0': bounds broken"):
        asked.result(timeout=30)
    broker.close_job("job-r")
    broker.close()


def _declaration(row_bound: int, _: msg.Task) -> msg.Reply:
    return msg.DeclarationReply(
        row_bound=row_bound, value_bound=4.0, row_bound_source="configured",
        value_bound_source="configured", enforces_fcm_rule=False,
    )


def _centers(centers: np.ndarray, _: msg.Task) -> msg.Reply:
    return msg.KfedCentersReply(centers=msg.WireArray.of(centers))


def test_the_one_shot_stages_over_the_broker_wait_in_one_thread(db: Database) -> None:
    """The declarations and k-FED's local centers (stages asked once per job) go to the broker
    as one round each: while every task is out, only the asking thread was started; the
    answers come back in the participants' order and a silent participant drops out."""
    broker = Broker(db, timeout=0.5)
    job = _job(db)
    remotes = _remotes(broker.open_job(job))
    before = {t.ident for t in threading.enumerate()}
    declared = _in_thread(lambda: declare_job(remotes, job.spec, n_features=2))
    _wait_for(lambda: _waiting(broker) == NAMES)
    assert len({t.ident for t in threading.enumerate()} - before) == 1
    for i, name in reversed(list(enumerate(NAMES))):
        _answer(broker, name, functools.partial(_declaration, 64 * 2**i))
    bounds = declared.result(timeout=30)
    assert list(bounds.declarations) == NAMES
    assert bounds.max_rows == 256

    local = {"p0": CENTERS, "p2": CENTERS + 10.0}
    before = {t.ident for t in threading.enumerate()}
    centers = _in_thread(lambda: run_kfed(remotes, 2, seed=0))
    _wait_for(lambda: _waiting(broker) == NAMES)
    assert len({t.ident for t in threading.enumerate()} - before) == 1
    for name, mine in local.items():  # p1 stays silent and drops out
        task = _answer(broker, name, functools.partial(_centers, mine))
        assert isinstance(task.spec, msg.KfedCentersTask) and task.spec.k_local == 2
    result = centers.result(timeout=30)
    assert result.history[0].responders == ("p0", "p2")
    assert remotes[1].dropped is not None
    assert any("participant 'p1' dropped out" in note for note in result.notes)
    broker.close_job("job-r")
    broker.close()



def _serve_job(
    broker: Broker, run: Callable[[], T], answer: Callable[[str, msg.TaskSpec], msg.Reply]
) -> tuple[T, list[int]]:
    """Run ``run`` in a thread of its own and answer every task it sends (``answer(name,
    spec)``) until it ends: its result, and how many threads had been started since it
    began each time tasks were handed out (its own, plus any it started to ask)."""
    before = {t.ident for t in threading.enumerate()}
    job = _in_thread(run)
    started: list[int] = []
    deadline = time.monotonic() + 60
    while not job.done():
        assert time.monotonic() < deadline, "the job did not finish"
        out = [(n, body) for n in NAMES if (body := broker.poll(n, blobs=False)) is not None]
        if not out:
            time.sleep(0.002)
            continue
        started.append(len({t.ident for t in threading.enumerate()} - before))
        for name, body in out:
            task = msg.Task.model_validate_json(body)
            broker.submit(name, msg.Contribution(
                job_id=task.job_id, task_id=task.task_id, reply=answer(name, task.spec)))
    return job.result(), started


def _distill_reply(_: str, spec: msg.TaskSpec) -> msg.Reply:
    if isinstance(spec, msg.DistillSoftTask):
        n_public = spec.public.shape[0]
        return msg.DistillSoftReply(soft_sum=msg.WireArray.of(np.full((n_public, 2), 0.5)),
                                    members=msg.WireArray.of(np.ones(1)))
    assert isinstance(spec, msg.DistillTrainTask | msg.DistillStepTask), spec.kind
    return msg.AckReply()


def test_fed_distill_and_fedcref_rounds_over_the_broker_wait_in_one_thread(
    db: Database,
) -> None:
    """The model-based drivers' rounds (training, soft predictions, distillation; FedCRef's
    init, training, models, scores, FedAvg sums, refinement) go to the broker as one round
    each: whenever tasks are out, only the job's own thread was started (a thread per
    participant before)."""
    broker = Broker(db, timeout=30.0)
    distill = msg.JobCreate(
        algorithm="fed-distill", participants=NAMES, seed=0, protection="none",
        **{"distill": DistillParams(public=msg.WireArray.of(np.zeros((4, 2))), n_classes=2,
                                        mode="global")},
    )
    remotes = _remotes(broker.open_job(db.create_job("job-d", distill, n_features=2)))
    result, started = _serve_job(broker, lambda: run_distill_job(remotes, distill),
                                 _distill_reply)
    assert [r.stage for r in result.history] == ["train_local", "teachers", "distill"]
    assert result.groups == (tuple(NAMES),)
    assert len(started) >= 3 and set(started) == {1}
    broker.close_job("job-d")

    fedcref = msg.JobCreate(
        algorithm="fedcref", participants=NAMES, seed=0, protection="none",
        **{"fedcref": FedCRefParams(hidden=(3,), fedavg_rounds=1, max_iterations=1)},
    )
    channel = broker.open_job(db.create_job("job-f", fedcref, n_features=StandIn.n_features))
    remotes = [RemoteParticipant(n, channel=channel, n_features=StandIn.n_features)
               for n in NAMES]
    members = {n: StandIn(n) for n in NAMES}
    grouped, started = _serve_job(
        broker, lambda: run_fedcref_job(remotes, fedcref),
        lambda name, spec: members[name].answer(spec),
    )
    assert grouped.iterations[0].n_groups == 2  # clusters 0 and clusters 1 of p0, p1, p2
    assert all(len(m.fedavg) == 4 and m.refined_with == [2] for m in members.values())
    assert len(started) >= 9 and set(started) == {1}
    broker.close_job("job-f")
    broker.close()
