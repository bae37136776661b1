"""The contract every registered algorithm keeps, checked over the registry (as
scikit-learn's ``parametrize_with_checks`` checks every estimator).

For every algorithm of ``protocol.algorithms``, and for two new ones each written in one
module and registered only here — ``toy-damped-fcm`` (:mod:`tests.contract.toy_algorithm`: a
new combine step over an existing statistic) and ``toy-lloyd``
(:mod:`tests.contract.toy_lloyd`: a new statistic and its combine step) — a policy, a
participant's config and the command line accept its name; the coordinator's OpenAPI
document lists it (and its statistics); the disclosure ledger has its notes. A sweep
algorithm also gives the same centers whether its sums travel in the clear, masked or
Paillier-encrypted (within the fixed-point resolution, n·2^-40), or is refused under
protection when it sends local centers by design; runs over the in-process service exactly
as in the simulator, with a ledger that says what it revealed; and goes on without a
participant that stops answering, saying so. The model-based algorithms' runs need PyTorch
and minutes (``tests/deep``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fedclust.cli import _parser
from fedclust.config_files import participant_config, write_toml
from fedclust.coordinator.app import openapi_document
from fedclust.coordinator.job import result_document, run_job
from fedclust.coordinator.remote import RemoteParticipant
from fedclust.core.errors import RefusedError
from fedclust.data.federations import Federation
from fedclust.inprocess import run_in_process
from fedclust.participant.config import ParticipantConfig
from fedclust.participant.local import LocalParticipant
from fedclust.participant.policy import Policy
from fedclust.protocol import algorithms
from fedclust.protocol.wire import messages as msg
from fedclust.simulate import CountingService, simulate
from tests.contract import toy_algorithm, toy_lloyd
from tests.coordinator.test_dropout import NAMES, DroppingChannel, _parts

TOYS = [toy_algorithm.SPEC.name, toy_lloyd.SPEC.name]
ALL = [*algorithms.names(), *TOYS]
SWEEP = [*algorithms.names("sweep"), *TOYS]


@pytest.fixture(autouse=True, scope="module")
def _toys_registered() -> Iterator[None]:
    algorithms.register(toy_algorithm.SPEC)
    algorithms.register(toy_lloyd.SPEC)
    algorithms.register_statistic(toy_lloyd.STATISTIC)
    yield
    algorithms.unregister_statistic(toy_lloyd.STATISTIC.name)
    for name in TOYS:
        algorithms.unregister(name)


def _federation() -> Federation:
    return Federation("contract", tuple(_parts()), None)


def _protections(name: str) -> list[msg.ProtectionScheme]:
    return ["none"] if algorithms.get(name).plain_only else ["none", "masking", "paillier"]


@pytest.mark.parametrize("name", ALL)
def test_policy_and_config_accept_it(name: str, tmp_path: Path) -> None:
    Policy().require(name)
    others = frozenset(n for n in algorithms.names() if n != name)
    with pytest.raises(RefusedError, match=f"algorithm '{name}' is not allowed"):
        Policy(allowed_algorithms=others).require(name)
    doc = participant_config(
        participant_id="org-0", coordinator_url="http://c.invalid",
        counting_url="http://n.invalid", token="t" * 43, state_dir="state",
        data_path="rows.csv", allowed_algorithms=[name],
    )
    path = write_toml(tmp_path / "participant.toml", doc)
    config = ParticipantConfig.load(path, environment=False)
    assert config.policy.allowed_algorithms == frozenset({name})


@pytest.mark.parametrize("name", ALL)
def test_the_openapi_document_lists_it(name: str) -> None:
    schemas = openapi_document()["components"]["schemas"]
    assert name in schemas["JobCreate"]["properties"]["algorithm"]["enum"]
    assert name in schemas["Task"]["properties"]["algorithm"]["enum"]
    for statistic in algorithms.get(name).statistics:
        assert statistic in schemas["StatisticTask"]["properties"]["name"]["enum"]


@pytest.mark.parametrize("name", ALL)
def test_the_command_line_offers_it(name: str) -> None:
    for command in (["job", "submit", "--participants", "a,b,c"], ["simulate", "--dataset", "x"]):
        args = _parser().parse_args([*command, "--algorithm", name])
        assert args.algorithm == name


@pytest.mark.parametrize("name", ALL)
def test_it_has_ledger_notes(name: str) -> None:
    spec = algorithms.get(name)
    assert spec.plain_notes.startswith(name)
    assert spec.plain_only or (spec.protected_notes or "").startswith(f"{name}")


@pytest.mark.parametrize("name", SWEEP)
def test_plain_masked_and_paillier_give_the_same_centers(name: str) -> None:
    fed = _federation()
    centers = {}
    for protection in ("none", "masking", "paillier"):
        if protection not in _protections(name):
            with pytest.raises(ValueError, match="local centers by design"):
                simulate(fed, algorithm=name, ks=[3], seed=4, protection=protection)
            continue
        report = simulate(fed, algorithm=name, ks=[3], seed=4, protection=protection)
        (entry,) = report.to_document().sweep
        centers[protection] = np.array(entry.centers, dtype=np.float64)
    # Each protected sum is within n·2^-41 of the plain one; the runs' few rounds keep the
    # centers within 1e-6 of each other (the protection-magnitude tests bound it tightly).
    for protection, c in centers.items():
        np.testing.assert_allclose(c, centers["none"], atol=1e-6, err_msg=protection)


@pytest.mark.parametrize("name", SWEEP)
def test_the_service_runs_it_as_the_simulator_does(name: str, tmp_path: Path) -> None:
    fed = _federation()
    protection = _protections(name)[-1]
    spec = msg.JobCreate(algorithm=name, participants=NAMES, k=3, seed=4, protection=protection)
    ledgers: list[msg.DisclosureLedger] = []
    served = run_in_process(
        fed, spec, workdir=tmp_path,
        on_finished=lambda client, job: ledgers.append(client.disclosures(job.id)),
    )
    direct = simulate(fed, algorithm=name, ks=[3], seed=4, protection=protection).to_document()
    assert [e.centers for e in served.sweep] == [e.centers for e in direct.sweep]
    assert [e.fed_fuzzy_db for e in served.sweep] == [e.fed_fuzzy_db for e in direct.sweep]
    (ledger,) = ledgers
    registered = algorithms.get(name)
    expected = registered.plain_notes if protection == "none" else registered.protected_notes
    assert expected in ledger.notes
    assert {d.participant for d in ledger.disclosures} == set(NAMES)
    if registered.statistics:  # its statistics reached the coordinator only as sums
        kinds = {d.reply_kind for d in ledger.disclosures}
        assert ("statistic" in kinds) == (protection == "none"), kinds


@pytest.mark.parametrize("name", SWEEP)
def test_a_participant_that_stops_answering_is_left_out(name: str) -> None:
    counter = CountingService(NAMES)
    locals_ = {
        n: LocalParticipant(X, name=n, count_sink=counter.report)
        for n, X in zip(NAMES, _parts(), strict=True)
    }
    # Tasks 0 and 1 are the declaration and the count, 2 the fuzzy algorithms' initial box;
    # org-2 falls silent at the algorithm's first task of the sweep.
    first = 3 if algorithms.get(name).fuzzy else 2
    channel = DroppingChannel(locals_, name, who="org-2", after=first)
    remotes = [RemoteParticipant(n, channel=channel, n_features=2) for n in NAMES]
    spec = msg.JobCreate(algorithm=name, participants=NAMES, k_range=(2, 3), seed=3,
                         protection="none")
    doc = result_document(run_job(remotes, spec, total_count=counter.total), spec)
    assert channel.timeouts == 1
    assert any("participant 'org-2' dropped out" in n for n in doc.notes), doc.notes
    assert [e.k for e in doc.sweep] == [2, 3]


def test_an_unknown_name_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown algorithm; choose one of 'ffcm'") as error:
        msg.JobCreate(algorithm="nope", participants=NAMES, k=2)
    assert "nope" not in str(error.value).replace("input_value='nope'", "")
    with pytest.raises(ValueError, match=r"unknown algorithm 'nope'; choose one of 'ffcm'"):
        algorithms.get("nope")
    with pytest.raises(ValueError, match="already registered"):
        algorithms.register(toy_algorithm.SPEC)
    with pytest.raises(ValueError, match="must send SWEEP_TASKS"):
        algorithms.AlgorithmSpec(
            name="incomplete", title="", family="sweep", tasks=frozenset({"fcm_sums"}),
            procedure_path="m:f", plain_notes="incomplete: …", protected_notes=None,
        )


def test_a_statistic_reply_is_checked_against_its_declared_shapes() -> None:
    centers = msg.WireArray.of(np.zeros((3, 2)))
    task = msg.StatisticTask(name=toy_lloyd.STATISTIC.name, centers=centers)
    sums, counts = msg.WireArray.of(np.zeros((3, 2))), msg.WireArray.of(np.zeros(3))
    msg.check_reply(task, msg.StatisticReply(fields={"sums": sums, "counts": counts}), 2)
    with pytest.raises(ValueError, match="has the fields"):
        msg.check_reply(task, msg.StatisticReply(fields={"sums": sums}), 2)
    wrong = msg.WireArray.of(np.zeros(4))
    with pytest.raises(ValueError, match=r"'counts' must be float64 of shape \(3,\)"):
        msg.check_reply(task, msg.StatisticReply(fields={"sums": sums, "counts": wrong}), 2)
    with pytest.raises(ValueError, match="unknown statistic; choose one of 'toy_lloyd_sums'"):
        msg.StatisticTask(name="nope", centers=centers)
