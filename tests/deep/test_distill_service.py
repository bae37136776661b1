"""fed-distill over the real service (apps + agents in process) agrees with the simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fedclust import deep_simulate as ds  # noqa: E402
from fedclust.client import AnalystClient  # noqa: E402
from fedclust.coordinator.distillation import run_fed_distill  # noqa: E402
from fedclust.coordinator.secure_sum import MaskedSummation  # noqa: E402
from fedclust.core.errors import RefusedError  # noqa: E402
from fedclust.data.federations import Federation  # noqa: E402
from fedclust.inprocess import run_in_process  # noqa: E402
from fedclust.participant import dispatch  # noqa: E402
from fedclust.participant.config import DataSource  # noqa: E402
from fedclust.participant.distill_tasks import DistillTasks  # noqa: E402
from fedclust.participant.local import LocalParticipant  # noqa: E402
from fedclust.protocol.algorithms.fed_distill_params import DistillParams  # noqa: E402
from fedclust.protocol.wire import messages as msg  # noqa: E402
from fedclust.protocol.wire.messages import (  # noqa: E402
    DisclosureLedger,
    JobCreate,
    JobPublic,
    ResultDocument,
    WireArray,
)
from tests.deep._answering import distilling  # noqa: E402
from tests.deep._down import run_with_one_down  # noqa: E402
from tests.deep._ledger import assert_only_masked_inputs  # noqa: E402

SEED = 3
# The simulator's federation for these settings (simulate_fed_distill builds the same one from
# the same seed): 3 groups x 3 clients, 3 classes per group; few epochs keep the test fast
# (the grouping is fixed before distillation).
SETUP: dict[str, Any] = {
    "groups": 3, "clients_per_group": 3, "classes_per_group": 3, "samples_per_class": 30,
    "public_per_class": 20, "test_per_class": 20,
}
EPOCHS = 2


def _local(tasks: DistillTasks, X: Any) -> LocalParticipant:
    local = LocalParticipant(X, name="p")
    local.model_tasks = tasks
    return local


def _service(
    setup: dict[str, Any], ledgers: list[DisclosureLedger] | None = None
) -> ResultDocument:
    """The masked job over the real service (apps and agents in this process) on the
    simulator's federation for ``setup``."""
    fed = ds.distill_federation(ds.load_dataset("digits"), kind="mlp", seed=SEED, **setup)
    spec = JobCreate(
        algorithm="fed-distill", participants=[p.name for p in fed.participants], seed=SEED,
        protection="masking",
        **{"distill": DistillParams(public=WireArray.of(fed.public), n_classes=10,
                                    epochs=EPOCHS)},
    )

    def keep_ledger(client: AnalystClient, job: JobPublic) -> None:
        if ledgers is not None:
            ledgers.append(client.disclosures(job.id))

    return run_in_process(
        Federation.from_pairs("digits", fed.rows), spec, labels=[y for _, y in fed.rows],
        on_finished=keep_ledger,
    )


def test_service_groups_like_the_simulator() -> None:
    sim = ds.simulate_fed_distill(
        "digits", **SETUP, distill_epochs=EPOCHS, protection="masking", seed=SEED
    )
    ledgers: list[DisclosureLedger] = []
    doc = _service(SETUP, ledgers)
    assert doc.groups == [g.members for g in sim.groups]
    assert doc.k_selected == sim.groups_found and doc.sweep == []
    small = [g.members for g in sim.groups if len(g.members) < 3]
    assert (doc.unprotected_groups or []) == small
    # One secure sum: the simulator's notes are the service's, its summation's included.
    assert sim.notes == doc.notes
    assert any(n.startswith("secure sums (key setup") for n in sim.notes)

    (ledger,) = ledgers
    protection: dict[tuple[str, str], set[str]] = {}
    for d in ledger.disclosures:
        for f in d.fields:
            protection.setdefault((d.task_kind, f.name), set()).add(f.protection)
    assert protection[("distill_counts", "label_counts")] == {"plain"}
    assert_only_masked_inputs(protection)
    plain_soft = any(k[0] == "distill_soft" for k in protection)
    assert plain_soft == bool(small)  # soft predictions in the clear only for small groups
    assert any("label-count" in n for n in ledger.notes)


def test_job_create_rules() -> None:
    public = WireArray.of(np.zeros((4, 64)))
    params = DistillParams(public=public, n_classes=10)
    with pytest.raises(ValueError, match="no k"):
        JobCreate(algorithm="fed-distill", participants=["a"], k=3, **{"distill": params})
    with pytest.raises(ValueError, match="needs a distill block"):
        JobCreate(algorithm="fed-distill", participants=["a"])
    with pytest.raises(ValueError, match="masking' or 'none"):
        JobCreate(algorithm="fed-distill", participants=["a"], protection="paillier",
                  **{"distill": params})
    with pytest.raises(ValueError, match="takes no distill block"):
        JobCreate(algorithm="fkm", participants=["a"], k=3, **{"distill": params})


def test_job_submit_flags_build_the_distill_block(tmp_path: Path) -> None:
    from fedclust.cli import _parser
    from fedclust.cli.job import _job_from_flags

    public = np.arange(12.0).reshape(3, 4)
    np.save(tmp_path / "public.npy", public)
    args = _parser().parse_args([
        "job", "submit", "--participants", "a,b,c", "--algorithm", "fed-distill",
        "--public", str(tmp_path / "public.npy"), "--n-classes", "5", "--seed", "1",
        "--distill-epochs", "4", "--temperature", "0.5",
    ])
    spec = _job_from_flags(args, args.participants)
    distill = spec.params(DistillParams)
    assert spec.k is None and np.array_equal(distill.public.to_numpy(), public)
    assert (distill.n_classes, distill.epochs, distill.temperature) == (5, 4, 0.5)
    args = _parser().parse_args(
        ["job", "submit", "--participants", "a", "--algorithm", "fed-distill"]
    )
    with pytest.raises(ValueError, match="--public"):
        _job_from_flags(args, args.participants)


def test_labels_come_from_the_label_column_and_are_needed(tmp_path: Path) -> None:
    rows = np.column_stack([np.random.default_rng(0).random((6, 3)), [0, 1, 2, 0, 1, 2]])
    np.save(tmp_path / "d.npy", rows)
    source = DataSource(tmp_path / "d.npy", label_column=3)
    assert source.load().shape == (6, 3)
    assert source.load_labels() is not None
    assert list(source.load_labels()) == [0, 1, 2, 0, 1, 2]  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="whole numbers"):
        DataSource(tmp_path / "d.npy", label_column=0).load_labels()
    unlabelled = DistillTasks(source.load(), None, name="p")
    reply = dispatch.answer(_local(unlabelled, source.load()), msg.DistillTrainTask(
        seed=1, n_classes=3))
    assert isinstance(reply, msg.RefusalReply) and "label_column" in reply.reason
    untrained = DistillTasks(source.load(), source.load_labels(), name="p")
    reply = dispatch.answer(_local(untrained, source.load()), msg.DistillSoftTask(
        public=msg.WireArray.of(source.load()), n_classes=3, members=["p"]))
    assert isinstance(reply, msg.RefusalReply) and "no trained classifier" in reply.reason


def test_groups_below_the_minimum_cohort_are_summed_as_the_service_sums_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two groups of two: neither the simulator nor the service masks their teacher sums
    (MaskedSummation.sum is never called), both list them as unprotected with the same
    notes."""
    setup = {**SETUP, "groups": 2, "clients_per_group": 2}
    cohorts: list[list[str]] = []
    original = MaskedSummation.sum

    def spy(self: MaskedSummation, participants: Any, *args: Any, **kwargs: Any) -> Any:
        cohorts.append([p.name for p in participants])
        return original(self, participants, *args, **kwargs)

    monkeypatch.setattr(MaskedSummation, "sum", spy)
    sim = ds.simulate_fed_distill(
        "digits", **setup, distill_epochs=EPOCHS, protection="masking", seed=SEED
    )
    assert [len(g.members) for g in sim.groups] == [2, 2]
    assert not cohorts
    assert not any(g.protected for g in sim.groups)
    assert sum("could not be protected by secure aggregation" in n for n in sim.notes) == 2
    doc = _service(setup)
    assert not cohorts
    assert doc.groups == [g.members for g in sim.groups]
    assert doc.unprotected_groups == doc.groups
    assert sim.notes == doc.notes


def test_a_restarted_agent_resumes_with_its_saved_classifier(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    X, y = rng.random((40, 6)), np.repeat([0, 1], 20)
    public = msg.WireArray.of(rng.random((10, 6)))
    store = tmp_path / "job-1.distill.npz"
    before = DistillTasks(X, y.astype(np.int64), name="p", store=store)
    before.answer(msg.DistillTrainTask(seed=3, n_classes=2))
    soft = msg.DistillSoftTask(public=public, n_classes=2, members=["p"])
    expected = before.answer(soft)
    assert store.exists()
    # A new agent process: nothing in memory, the saved classifier on disk.
    after = DistillTasks(X, y.astype(np.int64), name="p", store=store)
    reloaded = after.answer(soft)
    assert isinstance(expected, msg.DistillSoftReply) and isinstance(reloaded, msg.DistillSoftReply)
    assert np.array_equal(expected.soft_sum.to_numpy(), reloaded.soft_sum.to_numpy())
    store.write_bytes(b"not a zip")
    damaged = DistillTasks(X, y.astype(np.int64), name="p", store=store)
    reply = dispatch.answer(_local(damaged, X), soft)
    assert isinstance(reply, msg.RefusalReply) and "damaged" in reply.reason


def test_soft_predictions_are_given_only_to_a_group_that_names_the_participant() -> None:
    rng = np.random.default_rng(1)
    X, y = rng.random((30, 4)), np.repeat([0, 1], 15).astype(np.int64)
    tasks = DistillTasks(X, y, name="p")
    tasks.answer(msg.DistillTrainTask(seed=1, n_classes=2))
    public = msg.WireArray.of(rng.random((5, 4)))
    reply = tasks.answer(msg.DistillSoftTask(public=public, n_classes=2, members=["p", "q"]))
    assert isinstance(reply, msg.DistillSoftReply)
    with pytest.raises(RefusedError, match="for a group without 'p'"):
        tasks.answer(msg.DistillSoftTask(public=public, n_classes=2, members=["q", "r"]))


def test_soft_predictions_leave_once_per_classifier_for_one_group(tmp_path: Path) -> None:
    """The same task again is answered (a resumed coordinator, its members in any order),
    another claimed group or a task after the distillation step is refused, across an agent
    restart; so is a new training that would give new predictions to ask for."""
    rng = np.random.default_rng(2)
    X, y = rng.random((30, 4)), np.repeat([0, 1], 15).astype(np.int64)
    public = msg.WireArray.of(rng.random((5, 4)))
    store = tmp_path / "job-1.distill.npz"
    tasks = DistillTasks(X, y, name="p", store=store)
    tasks.answer(msg.DistillTrainTask(seed=1, n_classes=2))

    def soft(*group: str) -> msg.DistillSoftTask:
        return msg.DistillSoftTask(public=public, n_classes=2, members=list(group))

    tasks.answer(msg.DistillTrainTask(seed=1, n_classes=2))  # a resent training, before
    first = tasks.answer(soft("p", "q"))
    again = DistillTasks(X, y, name="p", store=store).answer(soft("q", "p"))  # restarted
    assert isinstance(first, msg.DistillSoftReply) and isinstance(again, msg.DistillSoftReply)
    assert first.soft_sum == again.soft_sum
    for other in (soft("p"), soft("p", "r")):
        with pytest.raises(RefusedError, match="for another group"):
            DistillTasks(X, y, name="p", store=store).answer(other)
    with pytest.raises(RefusedError, match="trained once per job"):  # new predictions to ask
        DistillTasks(X, y, name="p", store=store).answer(msg.DistillTrainTask(seed=2, n_classes=2))
    tasks.answer(msg.DistillStepTask(
        public=public, teacher=first.soft_sum, temperature=1.0, epochs=1, seed=1))
    with pytest.raises(RefusedError, match="after this job's distillation step"):
        DistillTasks(X, y, name="p", store=store).answer(soft("p", "q"))
    for agent in (tasks, DistillTasks(X, y, name="p", store=store)):
        with pytest.raises(RefusedError, match="trained once per job"):
            agent.answer(msg.DistillTrainTask(seed=2, n_classes=2))
    with pytest.raises(RefusedError, match="after this job's distillation step"):
        tasks.answer(soft("p"))


def test_a_member_down_at_submission_drops_out_at_the_declaration(tmp_path: Path) -> None:
    """Nine members enrol, one agent stops before a masked job is submitted: after one task
    timeout at the declaration the job groups the other eight as the driver groups them."""
    fed = ds.distill_federation(ds.load_dataset("digits"), kind="mlp", seed=SEED, **SETUP)
    names = [p.name for p in fed.participants]
    gone = names[1]
    params = DistillParams(public=WireArray.of(fed.public), n_classes=10, epochs=EPOCHS)
    spec = JobCreate(algorithm="fed-distill", participants=names, seed=SEED,
                     **{"distill": params})
    assert spec.protection == "masking"
    parts = [X for X, _ in fed.rows]
    labels = [y for _, y in fed.rows]
    doc = run_with_one_down(tmp_path, spec, parts, labels, gone=gone)
    assert any(n.startswith(f"participant '{gone}' dropped out at the declaration")
               for n in doc.notes), doc.notes
    alone = run_fed_distill(
        [distilling(p, X, y) for p, (X, y) in zip(fed.participants, fed.rows, strict=True)
         if p.name != gone],
        params, seed=SEED,
    )
    assert len(alone.groups) == SETUP["groups"]  # gone's group lost a member, not its group
    assert doc.groups == [list(g) for g in alone.groups], doc.notes
