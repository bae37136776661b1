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
and minutes (``tests/deep``). A third toy, ``toy-tuned-fcm`` (:mod:`tests.contract.toy_params`:
parameters of its own), is registered before the wire format is made, in a process of its
own: ``JobCreate``'s parameters blocks are made from the registry when
``protocol.wire.messages`` is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
from fedclust.protocol.algorithms import SWEEP_STATISTICS, SWEEP_TASKS
from fedclust.protocol.wire import messages as msg
from fedclust.simulate import CountingService, simulate
from tests.contract import toy_algorithm, toy_lloyd, toy_params
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
            name="incomplete", title="", family="sweep", tasks=frozenset({"statistic"}),
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
    with pytest.raises(ValueError, match=r"unknown statistic; choose one of .*'toy_lloyd_sums'"):
        msg.StatisticTask(name="nope", centers=centers)


def test_a_params_model_is_checked_when_registered() -> None:
    common: dict[str, Any] = {
        "name": "toy-x", "title": "", "family": "sweep", "tasks": SWEEP_TASKS,
        "statistics": SWEEP_STATISTICS,
        "procedure_path": "m:f", "plain_notes": "toy-x: …", "protected_notes": None,
    }
    with pytest.raises(ValueError, match="give params_block and params_path together"):
        algorithms.AlgorithmSpec(**common, params_block="x")
    with pytest.raises(ValueError, match="params_block must be an identifier"):
        algorithms.AlgorithmSpec(**common, params_block="_x", params_path="m:C")
    distill = algorithms.get("fed-distill").params_path
    with pytest.raises(ValueError, match="needs a default for every field"):
        _ = algorithms.AlgorithmSpec(**common, params_block="x", params_path=distill).params
    damping = toy_params.SPEC.params_path
    with pytest.raises(ValueError, match=r"preset 'p' sets dampening, not fields of Damping"):
        _ = algorithms.AlgorithmSpec(**common, params_block="x", params_path=damping,
                                     presets={"p": {"dampening": 1.0}}).params
    with pytest.raises(ValueError, match="is not a pydantic model"):
        _ = algorithms.AlgorithmSpec(**common, params_block="x",
                                     params_path=f"{toy_params.__name__}:procedure").params


def test_an_algorithm_registered_after_the_wire_format_gets_no_block() -> None:
    algorithms.register(toy_params.SPEC)
    try:
        with pytest.raises(ValueError, match=r"'damping' is not a field of JobCreate.*register"):
            msg.JobCreate(algorithm=toy_params.SPEC.name, participants=NAMES, k=3,
                          protection="none")
    finally:
        algorithms.unregister(toy_params.SPEC.name)


#: Run in a fresh interpreter where toy-tuned-fcm is installed as a plugin (an entry point of
#: the registry's group): registered before the wire format is made.
_TUNED = """
import json, pathlib, sys
from fedclust.protocol import algorithms
from tests.contract import toy_params
assert algorithms.get(toy_params.SPEC.name) is toy_params.SPEC
from fedclust.cli import _parser
from fedclust.cli.job import _job_from_flags
from fedclust.coordinator.app import openapi_document
from fedclust.data.federations import Federation
from fedclust.inprocess import run_in_process
from fedclust.protocol.wire import messages as msg
from fedclust.simulate import simulate
from tests.contract import toy_algorithm
from tests.coordinator.test_dropout import NAMES, _parts
algorithms.register(toy_algorithm.SPEC)
Damping, name = toy_params.DampingParams, toy_params.SPEC.name
out = {"block": openapi_document()["components"]["schemas"]["JobCreate"]["properties"]["damping"]}
job = msg.JobCreate(algorithm=name, participants=NAMES, k=3, protection="none")
out["default"] = job.params(Damping).damping
try:
    msg.JobCreate(algorithm="fkm", participants=NAMES, k=3, damping={"damping": 0.9})
except ValueError as exc:
    out["refused"] = str(exc)
argv = ["job", "submit", "--participants", ",".join(NAMES), "--algorithm", name, "--k", "3"]
for flags in (["--damping", "0.8"], ["--preset", "undamped"]):
    args = _parser().parse_args([*argv, *flags])
    out[" ".join(flags)] = _job_from_flags(args, args.participants).params(Damping).damping
fed = Federation("contract", tuple(_parts()), None)
def run(algorithm, params=None):
    (entry,) = simulate(fed, algorithm=algorithm, ks=[3], seed=4, protection="masking",
                        params=params).to_document().sweep
    return {"centers": entry.centers, "rounds": entry.rounds}
out["half"] = run(name, Damping(damping=0.5))
out["toy-damped-fcm"] = run("toy-damped-fcm")
out["full"] = run(name, Damping(damping=1.0))
spec = msg.JobCreate(algorithm=name, participants=NAMES, k=3, seed=4, protection="masking",
                     damping=Damping(damping=1.0))
(entry,) = run_in_process(fed, spec, workdir=pathlib.Path(sys.argv[1])).sweep
out["served"] = {"centers": entry.centers, "rounds": entry.rounds}
json.dump(out, sys.stdout)
"""


def _installed(tmp_path: Path, entries: dict[str, str]) -> dict[str, str]:
    """The environment of a process in which a package with these entry points of the
    registry's group is installed (its metadata on the path)."""
    site = tmp_path / "site"
    info = site / "toy_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugin\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
    (info / "entry_points.txt").write_text(f"[{algorithms.PLUGIN_GROUP}]\n{lines}")
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), root])}


def test_a_toy_with_parameters_runs_end_to_end(tmp_path: Path) -> None:
    """toy-tuned-fcm, installed as a plugin, and its ``damping`` block: in the OpenAPI
    document, its model's defaults when absent, refused for another algorithm, made from
    ``--damping`` and ``--preset``, and carried to its procedure by the simulator and the
    service: damping 0.5 is toy-damped-fcm's run, damping 1 (exact FCM's own step) another
    that needs fewer rounds."""
    done = subprocess.run(
        [sys.executable, "-c", _TUNED, str(tmp_path)], cwd=Path(__file__).resolve().parents[2],
        env=_installed(tmp_path, {"toy-tuned-fcm": toy_params.__name__}),
        capture_output=True, text=True, timeout=150, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert {"$ref": "#/components/schemas/DampingParams"} in out["block"]["anyOf"]
    assert out["block"]["description"] == (
        "Algorithm 'toy-tuned-fcm' only (absent: the defaults); absent otherwise.")
    assert out["default"] == 0.5
    assert "'fkm' takes no damping block" in out["refused"]
    assert (out["--damping 0.8"], out["--preset undamped"]) == (0.8, 1.0)
    assert out["half"] == out["toy-damped-fcm"]
    assert out["full"]["centers"] != out["half"]["centers"]
    assert out["full"]["rounds"] < out["half"]["rounds"]
    assert out["served"] == out["full"]


@pytest.mark.parametrize(
    ("value", "reason"),
    [("tests.contract.no_such_module", "No module named 'tests.contract.no_such_module'"),
     ("tests.contract.toy_algorithm:damped_fcm", "it lists no SPECS and no STATISTICS"),
     ("fedclust.protocol.algorithms.fkm", "algorithm 'fkm' is already registered")],
    ids=["missing", "not-a-module-of-specs", "clash"],
)
def test_a_plugin_that_cannot_be_registered_stops_the_import(
    tmp_path: Path, value: str, reason: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import fedclust.protocol.algorithms"],
        env=_installed(tmp_path, {"broken": value}), capture_output=True, text=True,
        timeout=60, check=False,
    )
    assert done.returncode != 0
    assert (f"ImportError: the 'fedclust.algorithms' entry point 'broken' = {value!r} could "
            "not be registered: ") in done.stderr
    assert reason in done.stderr
