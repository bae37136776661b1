"""The real apps and agents in one process (ASGI, no sockets) equal the direct simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedclust.data.federations import build_federation
from fedclust.inprocess import run_in_process
from fedclust.protocol.wire.messages import Algorithm, JobCreate
from fedclust.simulate import simulate


@pytest.mark.parametrize("algorithm", ["fedfcm", "fkm"])
def test_service_in_process_equals_the_simulator(algorithm: Algorithm, tmp_path: Path) -> None:
    fed = build_federation(dataset="motivational", seed=2)
    spec = JobCreate(algorithm=algorithm, participants=["a", "b", "c"], k_range=(3, 5), seed=7,
                     standardise=True)
    served = run_in_process(fed, spec, workdir=tmp_path)
    direct = simulate(fed, algorithm=algorithm, ks=range(3, 6), seed=7,
                      standardise=True).to_document()
    # The same functions on the same bits, with float64 exact on the wire: equality.
    assert served.k_selected == direct.k_selected
    assert [e.fed_fuzzy_db for e in served.sweep] == [e.fed_fuzzy_db for e in direct.sweep]
    assert [e.centers for e in served.sweep] == [e.centers for e in direct.sweep]
    # What a deployment leaves behind: the databases and each agent's state folder.
    assert (tmp_path / "coordinator.db").exists() and (tmp_path / "counting.db").exists()


def test_a_cohort_below_the_counting_minimum_fails_clearly(tmp_path: Path) -> None:
    fed = build_federation(dataset="motivational", seed=2)
    spec = JobCreate(algorithm="fedfcm", participants=["a", "b", "c"], k=3, seed=1)
    with pytest.raises(RuntimeError, match=r"failed: .*(min|at least) 4"):
        run_in_process(fed, spec, workdir=tmp_path, min_cohort=4)
