"""``fedclust simulate --algorithm fedcref|fed-distill`` on scikit-learn's 8x8 digits."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

torch = pytest.importorskip("torch")

from fedclust import deep_simulate as ds  # noqa: E402
from fedclust.cli import main  # noqa: E402
from fedclust.coordinator.distillation import sum_contributions  # noqa: E402
from fedclust.participant.deep.distill_local import DistillParticipant  # noqa: E402
from fedclust.protocol.distillation import COUNT, SOFT_SUM  # noqa: E402

# Small runs: few distillation epochs / FedAvg rounds keep the file fast; the groupings are
# what is tested, and they are fixed before (fed-distill) or barely depend on (FedCRef) them.
DISTILL_FAST = ["--distill-epochs", "3"]
FEDCREF_FAST = ["--clients", "6", "--fedavg-rounds", "2", "--max-iterations", "2"]


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    status, out, err = _run(capsys, *argv, "--json")
    assert status == 0, err
    doc: dict[str, object] = json.loads(out)
    return doc


def test_fed_distill_cli_prints_the_groups(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(
        capsys, "--dataset", "digits", "--algorithm", "fed-distill", *DISTILL_FAST
    )
    assert status == 0, err
    # 3 disjoint class sets of 3 digits, 4 clients each: the count vectors separate them
    # exactly (ARI 1 for this seed; the grouping does not depend on the distillation epochs).
    assert "groups found: 3   true groups: 3   ARI: 1.000" in out
    for g in range(3):
        assert f"group {g} [masked]" in out
    assert "g0-c0 (true group 0)" in out
    assert "overall accuracy" in out


def test_fedcref_cli_prints_the_groups_and_same_seed_same_grouping(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ("--dataset", "digits", "--algorithm", "fedcref", *FEDCREF_FAST, "--seed", "3")
    status, out, err = _run(capsys, *argv)
    assert status == 0, err
    assert "groups found:" in out and "wrong associations:" in out
    assert "mean ACC: initial" in out
    first = _json(capsys, *argv)
    second = _json(capsys, *argv)
    assert first["algorithm"] == "fedcref" and first["protection"] == "masking"
    groups = first["groups"]
    assert isinstance(groups, list) and groups, "this federation forms groups"
    assert first["groups_found"] == len(groups)
    # Same seed, same grouping (the masks are fresh random keys, but they cancel exactly).
    assert second["groups"] == groups
    assert second["isolated_clusters"] == first["isolated_clusters"]
    for group in groups:
        assert group["protected"] == (len({m.split(":")[0] for m in group["members"]}) >= 3)


def test_fed_distill_masking_and_none_give_the_same_grouping() -> None:
    masked = ds.simulate_fed_distill("digits", distill_epochs=2, protection="masking", seed=1)
    clear = ds.simulate_fed_distill("digits", distill_epochs=2, protection="none", seed=1)
    assert [g.members for g in masked.groups] == [g.members for g in clear.groups]
    assert masked.ari == clear.ari
    assert all(g.protected for g in masked.groups)
    assert not any(g.protected for g in clear.groups)
    assert any("pairwise masked" in n for n in masked.notes)


def test_masked_teacher_sum_equals_the_plain_sum() -> None:
    fed = ds.distill_federation(
        ds.load_dataset("digits"), groups=1, clients_per_group=4, classes_per_group=3,
        samples_per_class=20, public_per_class=10, test_per_class=5, kind="mlp", seed=0,
    )
    for i, p in enumerate(fed.participants):
        p.train_local(seed=2 * i)
    agg = ds.MaskedAggregator([p.name for p in fed.participants], {SOFT_SUM: 1.0, COUNT: 1.0})

    def ask(p: DistillParticipant) -> dict[str, NDArray[np.float64]]:
        return p.predict_soft(fed.public)

    masked = agg(fed.participants, ask)
    plain = sum_contributions(fed.participants, ask)
    # Tolerance 1e-6: with bound 1 and 4 parties the fixed-point scale is 2^-52 (the
    # representable band 2^62 / (4 · 1)), so each decoded coordinate is within
    # 4 · 2^-53 ≈ 4e-16 of the exact sum, plus float64 rounding of the plain sum (~1e-16):
    # the teacher is the same far below 1e-6, which is what the distillation could notice.
    np.testing.assert_allclose(masked[SOFT_SUM], plain[SOFT_SUM], rtol=0, atol=1e-6)
    assert masked[COUNT][0] == pytest.approx(4.0)
    assert agg.masked_rounds == 1 and not agg.clear_sums


def test_a_group_of_two_is_summed_in_the_clear_and_noted() -> None:
    fed = ds.distill_federation(
        ds.load_dataset("digits"), groups=1, clients_per_group=2, classes_per_group=2,
        samples_per_class=10, public_per_class=5, test_per_class=5, kind="mlp", seed=0,
    )
    agg = ds.MaskedAggregator([p.name for p in fed.participants], {"n": 10.0})
    total = agg(fed.participants, lambda p: {"n": np.array([3.0])})
    assert total["n"][0] == 6.0
    assert agg.masked_rounds == 0
    assert any("formed in the clear" in n for n in agg.notes)
    three = ds.MaskedAggregator(["a", "b", "c"], {"n": 1.0})
    with pytest.raises(ValueError, match="exceed its declared bound"):
        three([_Named("a"), _Named("b"), _Named("c")], lambda p: {"n": np.array([5.0])})


def test_mnist_absent_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ds, "MNIST_PATH", tmp_path / "missing" / "mnist_uint8.npz")
    status, _, err = _run(capsys, "--dataset", "mnist", "--algorithm", "fed-distill")
    assert status == 2
    assert "MNIST not found" in err and "--dataset digits" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algorithm", "fedcref", "--k", "3"], "--k does not apply to --algorithm fedcref"),
        (["--algorithm", "fed-distill", "--k-range", "2:4"], "--k-range does not apply"),
        (["--algorithm", "fedcref", "--groups", "3"], "--groups applies only to"),
        (["--algorithm", "fed-distill", "--theta", "0.3"], "--theta applies only to"),
        (["--algorithm", "fed-distill", "--alpha", "75"], "--alpha does not apply"),
        (["--algorithm", "kfed", "--k", "3", "--dirtiness", "0.1"], "--dirtiness applies only"),
        (["--algorithm", "kfed"], "needs --k or --k-range"),
        (["--algorithm", "fedcref", "--protection", "paillier"], "masking or none"),
        (["--algorithm", "fedcref", "--transport", "asgi"], "--transport does not apply"),
    ],
)
def test_flag_combinations_are_clear_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, out, err = _run(capsys, "--dataset", "digits", *argv)
    assert status == 2 and out == ""
    assert message in err


def test_unknown_dataset_and_bad_values_are_clear_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, _, err = _run(capsys, "--dataset", "xclara", "--algorithm", "fedcref")
    assert status == 2 and "--dataset digits or mnist" in err
    status, _, err = _run(
        capsys, "--dataset", "digits", "--algorithm", "fed-distill", "--samples-per-class",
        "500",
    )
    assert status == 2 and "too few rows" in err
    with pytest.raises(SystemExit):
        main(["simulate", "--dataset", "digits", "--algorithm", "fedcref",
              "--classes-per-client", "5:2"])
    assert "expected 1 <= A <= B <= 10" in capsys.readouterr().err


def test_missing_torch_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(RuntimeError, match=r"install fedclust\[deep\]"):
        ds.simulate_fedcref("digits")
