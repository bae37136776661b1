"""The real apps and agents in one process (ASGI, no sockets) equal the direct simulator."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fedclust.client import AnalystClient, AnalystConfig
from fedclust.config_files import FederationFiles, write_federation
from fedclust.data.federations import build_federation
from fedclust.inprocess import run_in_process, serving
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


def _named_federation(tmp_path: Path) -> FederationFiles:
    """Three agents reading CSV files whose [data] columns are ``sepal, petal``."""
    fed = build_federation(dataset="motivational", seed=2)
    shares = {}
    for pid, X in zip(("a", "b", "c"), fed.parts, strict=True):
        pd.DataFrame(X, columns=["sepal", "petal"]).to_csv(tmp_path / f"{pid}.csv", index=False)
        shares[pid] = f"{pid}.csv"
    return write_federation(
        tmp_path, data=shares, coordinator_port=8700, counting_port=8701,
        columns=["sepal", "petal"], protections=["none"],
    )


def test_the_jobs_feature_names_reach_the_result_and_a_mismatch_is_refused(
    tmp_path: Path,
) -> None:
    files = _named_federation(tmp_path)
    named = JobCreate(algorithm="fkm", participants=["a", "b", "c"], k_range=(2, 3), seed=3,
                      protection="none", feature_names=["sepal", "petal"])
    swapped = named.model_copy(update={"feature_names": ["petal", "sepal"]})
    with serving(files) as coordinator:
        config = AnalystConfig(coordinator_url=files.coordinator_url, token=files.analyst_token)
        with AnalystClient(config, transport=coordinator.transport()) as client:
            client.wait_enrolled(["a", "b", "c"], timeout=60)
            done = client.follow(client.submit(named).id, poll=0.05, timeout=600)
            assert done.state == "succeeded", done.error
            assert client.result(done.id).feature_names == ["sepal", "petal"]
            ledger = client.disclosures(done.id)
            assert any("sepal, petal" in note for note in ledger.notes)
            refused = client.follow(client.submit(swapped).id, poll=0.05, timeout=600)
    assert refused.state == "failed"
    assert refused.error is not None
    # One fixed text: that the names differ, never where or the participant's own columns.
    assert "feature_names are not this participant's [data] columns" in refused.error
    assert "sepal" not in refused.error and "petal" not in refused.error
