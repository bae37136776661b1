"""The elbow on a real sweep (issue 23): ``fedclust simulate --dataset xclara --participants 5
--algorithm fedfcm --k-range 2:9 --seed 1`` took the FedFuzzDB peak as its elbow under the old
two-sided chord rule. Every view of the elbow (``--json``'s ``k_elbow``, ``sweep.csv``'s
``elbow`` column, the report, the plot and the dashboard) reads the document's ``k_elbow``,
which is :func:`protocol.maths.choose_k.select_elbow` of the sweep."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedclust.data.federations import build_federation
from fedclust.exports import sweep_frame
from fedclust.protocol.maths.choose_k import select_elbow
from fedclust.simulate import simulate


def test_xclara_sweep_elbow_is_not_the_fuzzy_db_peak(datasets: Path) -> None:
    if not (datasets / "xclara").is_dir():
        pytest.skip(f"xclara not found in {datasets}")
    fed = build_federation(dataset="xclara", participants=5, seed=1)
    doc = simulate(fed, algorithm="fedfcm", ks=range(2, 10), seed=1).to_document()
    ks = [e.k for e in doc.sweep]
    scores = np.asarray([e.fed_fuzzy_db for e in doc.sweep])
    assert ks == list(range(2, 10))
    assert doc.k_elbow == select_elbow(ks, scores)
    assert doc.k_elbow != ks[int(np.argmax(scores))]
    frame = sweep_frame(doc)
    assert frame.loc[frame["elbow"], "k"].tolist() == [doc.k_elbow]
