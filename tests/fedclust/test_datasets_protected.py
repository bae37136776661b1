"""The protected default runs on every shipped dataset ``none`` runs on, without flags (issue 9).

The bounds of the protected sums come from the participants' declared bounds, so no dataset
needs ``--max-rows`` or ``--value-bound`` (s-set1's values reach 1e6: the job's former default
bound of 1000 refused it). Each case runs exact FCM for one K and a few rounds, masked and in
the clear from the same start, for exact FCM, FedFCM and federated k-means, and the two must
agree to 1e-6 of the data's scale (each sum keeps >= 6 fractional bits on these bounds; a
center is a ratio of sums of hundreds of rows).
Skipped when the shared datasets are absent ($FEDCLUST_DATASETS, else ../shared/datasets).
"""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.cli import main
from fedclust.data.federations import build_federation
from fedclust.data.loaders import BUILTIN_NAMES, shared_datasets_dir
from fedclust.protocol.wire.messages import Algorithm, ProtectionScheme
from fedclust.simulate import simulate

pytestmark = pytest.mark.skipif(
    shared_datasets_dir() is None, reason="shared datasets not found (set FEDCLUST_DATASETS)"
)

# Every loader name; the G2 family by its extremes here, every shipped file in the slow test.
NAMES = [n for n in BUILTIN_NAMES if n != "g2-D-S"] + ["g2-1-10", "g2-512-100"]


def _g2_files() -> list[str]:
    folder = shared_datasets_dir()
    if folder is None:
        return []
    return sorted(f.name.removesuffix(".csv.gz") for f in (folder / "g2").glob("g2-*.csv.gz"))


def _agree(name: str, *, standardise: bool = False, protection: ProtectionScheme = "masking",
           k: int = 3, algorithm: Algorithm = "ffcm") -> None:
    fed = build_federation(dataset=name, seed=0)
    runs = [
        simulate(fed, algorithm=algorithm, ks=[k], seed=0, max_rounds=3, eps=0.0,
                 standardise=standardise, protection=p)
        for p in ("none", protection)
    ]
    plain, protected = (r.sweep.entries[0].result.centers for r in runs)
    scale = 1.0 if standardise else float(np.abs(np.concatenate(fed.parts)).max())
    np.testing.assert_allclose(protected, plain, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("algorithm", ["ffcm", "fedfcm", "fkm"])
@pytest.mark.parametrize("name", NAMES)
def test_default_protection_runs_on_the_dataset(name: str, algorithm: Algorithm) -> None:
    _agree(name, algorithm=algorithm)


@pytest.mark.slow
@pytest.mark.parametrize("name", _g2_files())
def test_default_protection_runs_on_every_g2_set(name: str) -> None:
    _agree(name, k=2)


@pytest.mark.parametrize("algorithm", ["ffcm", "fedfcm", "fkm"])
@pytest.mark.parametrize("name", ["s-set1", "bank"])
def test_default_protection_runs_standardised(name: str, algorithm: Algorithm) -> None:
    _agree(name, standardise=True, algorithm=algorithm)


def test_paillier_runs_on_a_small_dataset() -> None:
    _agree("xclara", protection="paillier")


def test_the_issue_command_runs_without_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--dataset", "s-set1", "--participants", "5", "--algorithm", "ffcm",
            "--k", "15", "--max-rounds", "3"]
    assert main(argv) == 0
    assert "centers at K = 15" in capsys.readouterr().out
