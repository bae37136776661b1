"""The routes the dashboard's job form and downloads use: the registered algorithms and a
finished job's result tables as CSV (the same files ``fedclust job result --out`` writes)."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from fedclust.exports import write_exports
from fedclust.protocol import algorithms
from fedclust.protocol.wire.messages import ResultDocument
from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    FakeCounting,
    Federation,
    auth,
    blobs,
    create_job,
    enrol,
    running_app,
    token,
    wait_for_state,
)


def test_the_algorithms_are_the_registry(tmp_path: Path) -> None:
    with running_app(tmp_path, FakeCounting()) as client:
        response = client.get(f"{API}/algorithms", headers=ANALYST)
        as_participant = client.get(f"{API}/algorithms", headers=auth(token(NAMES[0])))
        anonymous = client.get(f"{API}/algorithms")
    assert response.status_code == 200
    listed = response.json()
    assert [a["name"] for a in listed] == list(algorithms.names())
    for entry in listed:
        spec = algorithms.get(entry["name"])
        assert entry == {
            "name": spec.name, "title": spec.title, "family": spec.family,
            "plain_only": spec.plain_only, "counts_contributors": spec.counts_contributors,
        }
    assert as_participant.status_code == 403
    assert anonymous.status_code == 401


def test_a_finished_jobs_tables_download_as_the_exports_csv(tmp_path: Path) -> None:
    counting = FakeCounting()
    federation = Federation(blobs(), counting)
    with running_app(tmp_path, counting) as client:
        for name in NAMES:
            enrol(client, name)
        job = create_job(client, k=None, k_range=[2, 3], seed=5)
        base = f"{API}/jobs/{job['id']}/result"
        early = client.get(f"{base}/sweep.csv", headers=ANALYST)
        with federation.agents(client):
            done = wait_for_state(client, job["id"], ("failed", "succeeded"))
        assert done["state"] == "succeeded", done["error"]
        doc = ResultDocument.model_validate(client.get(base, headers=ANALYST).json())
        sweep = client.get(f"{base}/sweep.csv", headers=ANALYST)
        centers = client.get(f"{base}/centers.csv", headers=ANALYST)
        unknown = client.get(f"{base}/labels.csv", headers=ANALYST)
        as_participant = client.get(f"{base}/sweep.csv", headers=auth(token(NAMES[0])))
    assert early.status_code == 409
    assert sweep.status_code == centers.status_code == 200
    assert sweep.headers["content-type"].startswith("text/csv")
    assert f'filename="{job["id"]}-centers.csv"' in centers.headers["content-disposition"]
    written = {p.name: p for p in write_exports(doc, tmp_path / "exports")}
    assert sweep.text == written["sweep.csv"].read_text(encoding="utf-8")
    assert centers.text == written["centers.csv"].read_text(encoding="utf-8")
    table = pd.read_csv(io.StringIO(sweep.text))
    assert table["k"].tolist() == [2, 3]
    assert table["fed_fuzzy_db"].tolist() == [e.fed_fuzzy_db for e in doc.sweep]
    rows = pd.read_csv(io.StringIO(centers.text))
    assert rows.columns.tolist()[:2] == ["k", "center"]
    assert rows.columns.tolist()[-2:] == ["x0", "x1"]
    chosen = rows[rows["k"] == doc.k_selected]
    assert chosen["center"].tolist() == list(range(doc.k_selected))
    assert unknown.status_code == 422
    assert as_participant.status_code == 403
