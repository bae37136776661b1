"""A job's ``init``: the analyst's initial centers reach the drivers through the job (simulator
and service alike), are checked against the job and the data, and are public terms the
participants accept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from fedclust.client import AnalystClient, ApiError
from fedclust.coordinator.sweep import given_init, run_sweep
from fedclust.core.errors import RefusedError
from fedclust.data.federations import Federation, build_federation
from fedclust.inprocess import run_in_process
from fedclust.participant.local import LocalParticipant
from fedclust.participant.terms import OwnBounds, require_task
from fedclust.protocol import algorithms
from fedclust.protocol.maths.declaration import Declaration
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.messages import JobCreate, JobPublic, ProtectionScheme
from fedclust.simulate import simulate

TAKING = [n for n in algorithms.names("sweep") if algorithms.get(n).takes_init]
#: Three participants, each with rows of three blobs in [0, 1]^2.
FED = build_federation(dataset="motivational", seed=2)


def _converged(algorithm: str) -> np.ndarray:
    report = simulate(FED, algorithm=algorithm, ks=[3], seed=4, protection="none")
    return report.outcome.centers(0)


def test_the_registry_says_which_algorithms_take_init() -> None:
    assert set(TAKING) == {"ffcm", "fedfcm", "fedfcm-avg", "fkm"}
    assert not algorithms.get("kfed").takes_init


@pytest.mark.parametrize("algorithm", TAKING)
def test_init_at_converged_centers_converges_at_once_plain_or_masked(algorithm: str) -> None:
    seeded = _converged(algorithm)
    protections: list[ProtectionScheme] = (
        ["none"] if algorithms.get(algorithm).plain_only else ["none", "masking"]
    )
    found = []
    for protection in protections:
        report = simulate(
            FED, algorithm=algorithm, ks=[3], seed=9, protection=protection, init=seeded
        )
        (entry,) = report.outcome.sweep.entries
        assert entry.result.n_rounds <= 2 and entry.result.converged
        np.testing.assert_allclose(entry.result.centers, seeded, atol=1e-3)
        assert report.spec.init == seeded.tolist()  # public job terms
        found.append(entry.result.centers)
    for centers in found[1:]:  # masked = plain, up to the fixed-point encoding
        np.testing.assert_allclose(centers, found[0], rtol=0, atol=1e-9)


def test_init_is_in_the_data_units_when_the_job_standardises() -> None:
    scaled = Federation("scaled", tuple(p * [1.0, 100.0] + [3.0, -50.0] for p in FED.parts))
    report = simulate(scaled, algorithm="ffcm", ks=[3], seed=4, protection="none",
                      standardise=True)
    seeded = report.outcome.centers(0)  # original units
    again = simulate(scaled, algorithm="ffcm", ks=[3], seed=5, protection="masking",
                     standardise=True, init=seeded)
    assert again.outcome.sweep.entries[0].result.n_rounds <= 2
    scale = again.outcome.scale
    assert scale is not None and scale[1] > 10 * scale[0]  # z-scores: within eps of them
    np.testing.assert_allclose((again.outcome.centers(0) - seeded) / scale, 0.0, atol=1e-3)


def test_the_given_centers_are_the_first_broadcast() -> None:
    """fkm's round 1 is then a local step from them: the first round's shift is finite."""
    init = np.array([[0.2, 0.2], [0.5, 0.8], [0.8, 0.3]])
    report = simulate(FED, algorithm="fkm", ks=[3], seed=1, protection="none", init=init)
    first = report.outcome.sweep.entries[0].result.history[0]
    assert np.isfinite(first.shift)
    unseeded = simulate(FED, algorithm="fkm", ks=[3], seed=1, protection="none")
    assert unseeded.outcome.sweep.entries[0].result.history[0].shift == float("inf")


def test_jobs_refuse_an_init_that_does_not_fit_them() -> None:
    base = {"participants": ["a", "b", "c"], "k": 2, "init": [[0.0, 1.0], [2.0, 3.0]]}
    JobCreate(algorithm="ffcm", **base)  # fits
    cases: dict[str, dict[str, object]] = {
        "'kfed' takes no init": {"algorithm": "kfed", "protection": "none"},
        "give k, not k_range": {"algorithm": "fkm", "k": None, "k_range": (2, 3)},
        "init must be k=3 rows": {"algorithm": "ffcm", "k": 3},
        r"rows of widths \[1, 2\]": {"algorithm": "ffcm", "init": [[0.0], [2.0, 3.0]]},
        "feature_names names 3 features": {"algorithm": "ffcm",
                                           "feature_names": ["a", "b", "c"]},
    }
    for message, fields in cases.items():
        with pytest.raises(ValidationError, match=message):
            JobCreate.model_validate({**base, **fields})
    with pytest.raises(ValidationError, match="init"):
        JobCreate.model_validate({**base, "algorithm": "ffcm", "init": [[0.0, "nan"], [1, 2]]})


def test_the_engine_checks_init_against_the_data() -> None:
    with pytest.raises(ValueError, match=r"init must have n_features=2 columns"):
        simulate(FED, algorithm="ffcm", ks=[2], seed=1, protection="none",
                 init=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="init gives the initial centers of one K"):
        given_init(np.zeros((2, 2)), "ffcm", [2, 3], 2)
    with pytest.raises(ValueError, match="'kfed' takes no init"):
        given_init(np.zeros((2, 2)), "kfed", [2], 2)
    participants = [LocalParticipant(X, name=f"p{i}") for i, X in enumerate(FED.parts)]
    with pytest.raises(ValueError, match=r"init must have k=3 rows"):
        run_sweep("fedfcm", participants, [3], total_count=lambda: 1, init=np.zeros((2, 2)))


def test_a_protected_job_refuses_init_beyond_the_value_bound() -> None:
    far = np.array([[0.5, 0.5], [0.5, 1e6], [0.2, 0.2]])
    with pytest.raises(ValueError, match=r"init has a coordinate of magnitude 1e\+06, beyond "
                       r"twice the value bound"):
        simulate(FED, algorithm="ffcm", ks=[3], seed=1, protection="masking", init=far)
    plain = simulate(FED, algorithm="ffcm", ks=[3], seed=1, protection="none", init=far)
    assert plain.outcome.sweep.entries[0].result.n_rounds >= 1  # nothing is encoded


def test_participants_accept_the_tasks_of_a_job_with_init() -> None:
    """The initial centers are the analyst's public terms: the first round's tasks carry
    them, and the terms check takes them as any other broadcast centers."""
    init = [[0.2, 0.2], [0.5, 0.8], [0.8, 0.3]]
    own = OwnBounds.of(Declaration(64, 1.0, False, False, False), 2)
    centers = msg.WireArray.of(np.array(init))
    for algorithm, spec in (
        ("ffcm", msg.StatisticTask.of("fcm_sums", centers, m=2.0)),
        ("fkm", msg.HoldKmeansStepTask(centers=centers)),
    ):
        terms = JobCreate(algorithm=algorithm, participants=["a", "b", "c"], k=3, init=init,
                          protection="none")
        require_task(terms, algorithm, spec, own)  # accepted: the init's K=3 centers
        without = JobCreate(algorithm=algorithm, participants=["a", "b", "c"], k=2,
                            protection="none")
        with pytest.raises(RefusedError, match="task with 3 centers is outside the job's K=2"):
            require_task(without, algorithm, spec, own)  # the same task under K=2 is not


def test_init_reaches_the_drivers_over_the_service(tmp_path: Path) -> None:
    seeded = _converged("ffcm")
    spec = JobCreate(algorithm="ffcm", participants=["a", "b", "c"], k=3, seed=7,
                     init=seeded.tolist())
    seen: list[tuple[JobPublic, set[str]]] = []

    def inspect(client: AnalystClient, job: JobPublic) -> None:
        kinds = {d.task_kind for d in client.disclosures(job.id).disclosures}
        seen.append((client.job(job.id), kinds))

    served = run_in_process(FED, spec, workdir=tmp_path, on_finished=inspect)
    direct = simulate(FED, algorithm="ffcm", ks=[3], seed=7, init=seeded).to_document()
    (entry,) = served.sweep
    assert entry.rounds <= 2
    assert entry.centers == direct.sweep[0].centers  # the same driver, from the same init
    ((job, kinds),) = seen
    assert job.spec.init == seeded.tolist()
    assert "moment_sums" not in kinds  # no box was summed to draw initial centers


def test_the_service_refuses_an_init_of_another_width(tmp_path: Path) -> None:
    spec = JobCreate(algorithm="ffcm", participants=["a", "b", "c"], k=2,
                     init=[[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    with pytest.raises(ApiError, match="init rows have 3 values; the participants have 2"):
        run_in_process(FED, spec, workdir=tmp_path)
