"""FedCRef over the real service (apps + agents in process) agrees with the in-process driver,
and the wire carries what the ledger says: models and scores plain, group sums masked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sklearn.datasets import load_digits  # noqa: E402

from fedclust.client import AnalystClient  # noqa: E402
from fedclust.coordinator.fedcref import FedCRefResult, run_fedcref  # noqa: E402
from fedclust.data.federations import Federation  # noqa: E402
from fedclust.inprocess import run_in_process  # noqa: E402
from fedclust.participant import dispatch  # noqa: E402
from fedclust.participant.fedcref_tasks import FedCRefTasks  # noqa: E402
from fedclust.participant.local import LocalParticipant  # noqa: E402
from fedclust.protocol.algorithms.fedcref_params import FedCRefParams  # noqa: E402
from fedclust.protocol.maths.fedcref import dirty_labels  # noqa: E402
from fedclust.protocol.wire import messages as msg  # noqa: E402
from fedclust.protocol.wire.messages import (  # noqa: E402
    DisclosureLedger,
    JobCreate,
    JobPublic,
    ResultDocument,
)
from tests.deep._answering import answering  # noqa: E402
from tests.deep._down import run_with_one_down  # noqa: E402
from tests.deep._ledger import assert_only_masked_inputs  # noqa: E402

SEED = 4
# Clusters of 40 digits score ~0.35-0.55 for the same class (see test_fedcref.THETA_SMALL).
PARAMS = FedCRefParams(
    initial="labels", theta=0.55, epochs=8, fedavg_rounds=2, max_iterations=2
)


def _federation() -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """Five participants holding 2..3 of the digit classes 0..3, 40 rows each, with a dirty
    (d = 0.2) initial clustering as their own labels."""
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    rng = np.random.default_rng(SEED)
    names, parts, labels = [], [], []
    for c in range(5):
        classes = rng.choice(4, size=int(rng.integers(2, 4)), replace=False)
        rows = np.concatenate(
            [rng.choice(np.flatnonzero(y == v), 40, replace=False) for v in classes]
        )
        names.append(f"org-{c}")
        parts.append(X[rows])
        labels.append(dirty_labels(y[rows], 0.2, seed=rng).astype(np.int64))
    return names, parts, labels


@pytest.fixture(scope="module")
def federation() -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    return _federation()


@pytest.fixture(scope="module")
def reference(federation: Any) -> FedCRefResult:
    names, parts, labels = federation
    members = [  # each asked as the agent answers, without the service
        answering(FedCRefTasks(X, y, name=n), X, n)
        for n, X, y in zip(names, parts, labels, strict=True)
    ]
    return run_fedcref(members, PARAMS, seed=SEED)


def _service(
    federation: Any, protection: str, ledgers: list[DisclosureLedger]
) -> ResultDocument:
    names, parts, labels = federation
    spec = JobCreate(
        algorithm="fedcref", participants=names, seed=SEED, protection=protection,
        **{"fedcref": PARAMS},
    )

    def keep_ledger(client: AnalystClient, job: JobPublic) -> None:
        ledgers.append(client.disclosures(job.id))

    return run_in_process(
        Federation.from_pairs("digits", [(X, None) for X in parts]), spec, labels=labels,
        on_finished=keep_ledger,
    )


def _refs(result: FedCRefResult) -> tuple[list[list[str]], list[str]]:
    names = result.participants
    grouping = result.grouping
    return (
        [[f"{names[i]}:{q}" for i, q in g] for g in grouping.groups],
        [f"{names[i]}:{q}" for i, q in grouping.isolated],
    )


def test_plain_service_equals_the_driver_in_process(
    federation: Any, reference: FedCRefResult
) -> None:
    ledgers: list[DisclosureLedger] = []
    doc = _service(federation, "none", ledgers)
    groups, isolated = _refs(reference)
    assert reference.grouping.groups  # this federation forms groups (2 per iteration, written)
    assert doc.groups == groups and doc.isolated_clusters == isolated
    assert doc.k_selected == len(groups) and doc.sweep == []
    assert doc.stop_reason == reference.stop_reason
    assert doc.iterations is not None
    assert [(i.groups, i.isolated_clusters) for i in doc.iterations] == [
        (r.n_groups, r.n_isolated) for r in reference.iterations
    ]
    assert doc.unprotected_groups == groups  # protection none: every sum in the clear
    (ledger,) = ledgers
    kinds = {d.task_kind for d in ledger.disclosures}
    assert "fedcref_fedavg" in kinds and "secure_input" not in kinds


def test_masked_service_finds_the_same_groups_and_masks_group_sums(
    federation: Any, reference: FedCRefResult
) -> None:
    ledgers: list[DisclosureLedger] = []
    doc = _service(federation, "masking", ledgers)
    groups, isolated = _refs(reference)
    # The fixed-point encoding changes the FedAvg models by ~1e-9: the groupings agree.
    assert doc.groups == groups and doc.isolated_clusters == isolated
    (ledger,) = ledgers
    protection: dict[tuple[str, str], set[str]] = {}
    for d in ledger.disclosures:
        for f in d.fields:
            protection.setdefault((d.task_kind, f.name), set()).add(f.protection)
    assert protection[("fedcref_models", "models")] == {"plain"}
    assert_only_masked_inputs(protection)
    small = [
        g for g in reference.iterations[-1].grouping.groups if len({i for i, _ in g}) < 3
    ]
    plain_sums = any(k[0] == "fedcref_fedavg" for k in protection)
    assert plain_sums == any(
        len({i for i, _ in g}) < 3 for r in reference.iterations for g in r.grouping.groups
    )
    assert len(doc.unprotected_groups or []) == len(small)
    # No field the coordinator received has a row dimension: rows and labels stay home.
    n_rows = {X.shape[0] for X in federation[1]}
    for d in ledger.disclosures:
        for f in d.fields:
            assert not any(s and s[0] in n_rows for s in f.shapes or []), (d.task_kind, f.name)
    assert any("autoencoder" in n for n in ledger.notes)


def _local(tasks: FedCRefTasks, X: np.ndarray) -> LocalParticipant:
    local = LocalParticipant(X, name="p")
    local.model_tasks = tasks
    return local


def test_bad_input_is_refused_with_a_reason() -> None:
    X = np.random.default_rng(0).random((30, 16))
    init = msg.FedCRefInitTask(
        hidden=(8, 4), initial="labels", k_max=4, epochs=1, seed=1
    )
    reply = dispatch.answer(_local(FedCRefTasks(X, None, name="p"), X), init)
    assert isinstance(reply, msg.RefusalReply) and "label_column" in reply.reason
    reply = dispatch.answer(
        _local(FedCRefTasks(X * 5, None, name="p"), X),
        init.model_copy(update={"initial": "kmeans", "k": 2}),
    )
    assert isinstance(reply, msg.RefusalReply) and "[0, 1]" in reply.reason
    fresh = _local(FedCRefTasks(X, None, name="p"), X)
    reply = dispatch.answer(fresh, msg.FedCRefModelsTask())
    assert isinstance(reply, msg.RefusalReply) and "no FedCRef models" in reply.reason
    tasks = FedCRefTasks(X, np.repeat([0, 1], 15), name="p")
    local = _local(tasks, X)
    k = dispatch.answer(local, init)
    assert isinstance(k, msg.FedCRefInitReply) and k.k == 2
    other = msg.FedCRefFedavgTask(n_params=10, members={"q": [0]}, seeds={"q": 1}, epochs=1)
    reply = dispatch.answer(local, other)
    assert isinstance(reply, msg.RefusalReply) and "not a member" in reply.reason
    wrong = msg.FedCRefFedavgTask(n_params=10, members={"p": [0]}, seeds={"p": 1}, epochs=1)
    reply = dispatch.answer(local, wrong)
    assert isinstance(reply, msg.RefusalReply) and "n_params" in reply.reason
    scores = msg.FedCRefScoresTask(models=msg.WireArray.of(np.zeros((2, 7))), alpha=75)
    reply = dispatch.answer(local, scores)
    assert isinstance(reply, msg.RefusalReply) and "float32" in reply.reason


def test_job_create_rules() -> None:
    with pytest.raises(ValueError, match="no k"):
        JobCreate(algorithm="fedcref", participants=["a", "b"], k=3)
    with pytest.raises(ValueError, match="masking' or 'none"):
        JobCreate(algorithm="fedcref", participants=["a", "b", "c"], protection="paillier")
    with pytest.raises(ValueError, match="takes no fedcref block"):
        JobCreate(algorithm="fkm", participants=["a"], k=3, **{"fedcref": FedCRefParams()})
    with pytest.raises(ValueError, match="at least two"):
        JobCreate(algorithm="fedcref", participants=["a"], protection="none")
    with pytest.raises(ValueError, match="seeds must name the members"):
        msg.FedCRefFedavgTask(n_params=3, members={"a": [0]}, seeds={"b": 1}, epochs=1)
    spec = JobCreate(algorithm="fedcref", participants=["a", "b", "c"])
    assert spec.ks == [] and "fedcref" not in spec.model_dump(exclude_none=True)
    assert spec.params(FedCRefParams) == FedCRefParams()  # the defaults apply


def test_job_submit_flags_build_the_fedcref_block() -> None:
    from fedclust.cli import _parser
    from fedclust.cli.job import _job_from_flags

    args = _parser().parse_args([
        "job", "submit", "--participants", "a,b,c", "--algorithm", "fedcref",
        "--hidden", "50,20", "--theta", "0.4", "--initial", "labels", "--fedavg-rounds", "3",
        "--seed", "2",
    ])
    spec = _job_from_flags(args, args.participants)
    fedcref = spec.params(FedCRefParams)
    assert spec.k is None and fedcref.hidden == (50, 20) and fedcref.theta == 0.4
    assert fedcref.initial == "labels" and fedcref.fedavg_rounds == 3
    with pytest.raises(SystemExit):
        _parser().parse_args([
            "job", "submit", "--participants", "a", "--algorithm", "fedcref", "--hidden", "0"
        ])


def test_a_restarted_agent_resumes_with_its_saved_models(tmp_path: Any) -> None:
    X = np.random.default_rng(1).random((30, 16))
    y = np.repeat([0, 1, 2], 10).astype(np.int64)
    store = tmp_path / "job-1.fedcref.npz"
    init = msg.FedCRefInitTask(hidden=(8, 4), initial="labels", k_max=4, epochs=2, seed=1)
    before = FedCRefTasks(X, y, name="p", store=store)
    before.answer(init)
    others = msg.WireArray.of(np.random.default_rng(2).random((2, 356)).astype(np.float32))
    before.answer(msg.FedCRefRefineTask(models=others, seed=0))
    expected = before.answer(msg.FedCRefModelsTask())
    # A new agent process: nothing in memory, the saved assignment and models on disk.
    after = FedCRefTasks(X, y, name="p", store=store)
    assert after.answer(msg.FedCRefModelsTask()) == expected
    scores = msg.FedCRefScoresTask(models=others, alpha=75)
    assert after.answer(scores) == before.answer(scores)
    store.write_bytes(b"damaged")
    reply = dispatch.answer(_local(FedCRefTasks(X, y, name="p", store=store), X), scores)
    assert isinstance(reply, msg.RefusalReply) and "damaged" in reply.reason


def test_a_member_down_at_submission_drops_out_at_the_declaration(
    federation: Any, tmp_path: Path
) -> None:
    """Five members enrol, one agent stops before a masked job is submitted: after one task
    timeout at the declaration the job runs over the other four and finds what the driver
    finds over those four alone."""
    names, parts, labels = federation
    gone = names[2]  # the other four end with a group of three members (a masked sum)
    spec = JobCreate(algorithm="fedcref", participants=names, seed=SEED, **{"fedcref": PARAMS})
    assert spec.protection == "masking"
    doc = run_with_one_down(tmp_path, spec, parts, labels, gone=gone)
    assert any(n.startswith(f"participant '{gone}' dropped out at the declaration")
               for n in doc.notes), doc.notes
    members = [
        answering(FedCRefTasks(X, y, name=n), X, n)
        for n, X, y in zip(names, parts, labels, strict=True) if n != gone
    ]
    alone = run_fedcref(members, PARAMS, seed=SEED)
    groups, isolated = _refs(alone)
    assert groups  # the four form a group: the comparison is not between two empty lists
    assert (doc.groups, doc.isolated_clusters) == (groups, isolated), doc.notes
