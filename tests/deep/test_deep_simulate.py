"""``fedclust simulate --algorithm fedcref|fed-distill`` on scikit-learn's 8x8 digits."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fedclust import deep_simulate as ds  # noqa: E402
from fedclust.cli import main  # noqa: E402
from fedclust.coordinator.secure_sum import MaskedSummation, field_encodings  # noqa: E402
from fedclust.protocol.maths.distillation import COUNT, SOFT_SUM  # noqa: E402
from fedclust.protocol.wire import messages as msg  # noqa: E402

# Small runs: few distillation epochs / FedAvg rounds keep the file fast; the groupings are
# what is tested, and they are fixed before (fed-distill) or barely depend on (FedCRef) them.
DISTILL_FAST = ["--distill-epochs", "3"]
FEDCREF_FAST = ["--clients", "6", "--fedavg-rounds", "2", "--max-iterations", "2"]


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


@dataclass
class _Sum:
    """One call of the service's MaskedSummation.sum: who, what, and how far the masked
    aggregate lies from the plain sum of the same statistic, per field, against the
    service's precision guarantee for that field's encoding."""

    cohort: list[str]
    kind: str
    required: bool
    errors: dict[str, float] = field(default_factory=dict)
    guarantees: dict[str, float] = field(default_factory=dict)


def _spy_on_the_service_sum(
    monkeypatch: pytest.MonkeyPatch, *, compare: bool
) -> list[_Sum]:
    """Record every MaskedSummation.sum; with ``compare`` (soft predictions only), also
    compute every member's plain contribution with its simulated classifier (an agent gives
    its soft predictions once, to one group: it refuses to be asked again in the clear) and
    measure the masked sum against it."""
    calls: list[_Sum] = []
    original = MaskedSummation.sum
    models: dict[str, Any] = {}
    federation = ds.distill_federation

    def keep_models(*args: Any, **kwargs: Any) -> Any:
        fed = federation(*args, **kwargs)
        models.update((p.name, p) for p in fed.participants)
        return fed

    monkeypatch.setattr(ds, "distill_federation", keep_models)

    def spy(
        self: MaskedSummation, participants: Sequence[Any], statistic: msg.SumTaskSpec,
        reply_type: type[Any], *, required: bool = False,
    ) -> tuple[Any, tuple[str, ...]]:
        total, names = original(self, participants, statistic, reply_type, required=required)
        call = _Sum(sorted(p.name for p in participants), statistic.kind, required)
        calls.append(call)
        if compare:
            assert isinstance(total, msg.DistillSoftReply)
            assert isinstance(statistic, msg.DistillSoftTask)
            public = statistic.public.to_numpy()
            soft = [models[p.name].predict_soft(public) for p in participants]
            plain = {key: np.sum([s[key] for s in soft], axis=0) for key in (SOFT_SUM, COUNT)}
            masked = {SOFT_SUM: total.soft_sum.to_numpy(), COUNT: total.members.to_numpy()}
            wire = {SOFT_SUM: "soft_sum", COUNT: "members"}
            # A soft-prediction sum's bounds do not depend on the job's N and B.
            scales = {
                e.name: e.scale_bits for e in field_encodings(
                    statistic, n_features=participants[0].n_features, n_parties=len(names),
                    max_rows=1, value_bound=1.0,
                )
            }
            for key, value in plain.items():
                # crypto.fixedpoint: |decoded - exact| <= n · 2^-(f+1), plus float64 rounding
                # of the decoded and of the plain sum (a few ulps).
                n_ulps = 4 * np.finfo(np.float64).eps * float(np.max(np.abs(value)))
                call.guarantees[key] = len(names) * 2.0 ** -(scales[wire[key]] + 1) + n_ulps
                call.errors[key] = float(np.max(np.abs(masked[key] - value)))
        return total, names

    monkeypatch.setattr(MaskedSummation, "sum", spy)
    return calls


def test_fed_distill_masked_sums_are_the_service_sums_and_equal_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _spy_on_the_service_sum(monkeypatch, compare=True)
    masked = ds.simulate_fed_distill("digits", distill_epochs=2, protection="masking", seed=1)
    # Every teacher sum went through the service's MaskedSummation, one call per group, with
    # the group as its cohort and every member required (coordinator.distill_job).
    assert sorted(c.cohort for c in calls) == sorted(sorted(g.members) for g in masked.groups)
    assert all(c.kind == "distill_soft" and c.required for c in calls)
    for c in calls:
        assert set(c.errors) == {SOFT_SUM, COUNT}
        for key, error in c.errors.items():
            assert error <= c.guarantees[key], (key, error, c.guarantees[key])
    # The notes are the service's: one key setup per group (MaskedSummation's own note).
    setups = [n for n in masked.notes if n.startswith("secure sums (key setup")]
    assert len(setups) == len(masked.groups)
    calls.clear()
    clear = ds.simulate_fed_distill("digits", distill_epochs=2, protection="none", seed=1)
    assert not calls
    assert [g.members for g in masked.groups] == [g.members for g in clear.groups]
    assert masked.ari == clear.ari == 1.0
    assert all(g.protected for g in masked.groups)
    assert not any(g.protected for g in clear.groups)
    # Teachers equal to ~1e-12 give the distillation (float32) the same targets: the same
    # accuracies.
    assert masked.accuracy_per_true_group == pytest.approx(clear.accuracy_per_true_group,
                                                          abs=1e-9)
    assert not any("secure sums" in n for n in clear.notes)


# Six clients holding 4..5 classes, one FedCRef iteration: this seed associates a group of
# three participants (masked) and one of two (summed in the clear).
FEDCREF_MIXED: dict[str, Any] = {
    "clients": 6, "classes_per_client": (4, 5), "samples_per_class": 20, "fedavg_rounds": 1,
    "max_iterations": 1, "local_epochs": 20, "seed": 0,
}


def _participants(group: ds.DeepGroup) -> list[str]:
    return sorted({m.split(":")[0] for m in group.members})


def test_fedcref_masked_sums_are_the_service_sums_and_equal_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _spy_on_the_service_sum(monkeypatch, compare=False)
    masked = ds.simulate_fedcref("digits", protection="masking", **FEDCREF_MIXED)
    sizes = sorted(len(_participants(g)) for g in masked.groups)
    assert sizes == [2, 3]
    (large,) = [g for g in masked.groups if len(_participants(g)) >= 3]
    # The group of three: its start and each FedAvg round through the service's summation,
    # every member required; the group of two never (coordinator.fedcref_job).
    rounds = FEDCREF_MIXED["fedavg_rounds"] + 1
    assert [c.cohort for c in calls] == [_participants(large)] * rounds
    assert all(c.kind == "fedcref_fedavg" and c.required for c in calls)
    assert [g.protected for g in masked.groups] == [g is large for g in masked.groups]
    assert any(n.startswith("secure sums (key setup 1)") for n in masked.notes)
    assert any("1 group(s) of the last iteration had fewer than 3" in n for n in masked.notes)
    calls.clear()
    clear = ds.simulate_fedcref("digits", protection="none", **FEDCREF_MIXED)
    assert not calls and not any(g.protected for g in clear.groups)
    # FedAvg models within ~1e-12 of the plain ones (rounded to float32 before training):
    # the same groups, refinement and accuracies.
    for key in ("groups_found", "isolated_clusters", "wrong_associations", "ari"):
        assert getattr(masked, key) == getattr(clear, key), key
    assert [g.members for g in masked.groups] == [g.members for g in clear.groups]
    assert masked.final_accuracy == pytest.approx(clear.final_accuracy, abs=1e-9)


def test_mnist_absent_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FEDCLUST_DATASETS", str(tmp_path))  # the folder, without mnist/
    status, _, err = _run(capsys, "--dataset", "mnist", "--algorithm", "fed-distill")
    assert status == 2
    assert "MNIST not found" in err and "--dataset digits" in err
    assert str(tmp_path / "mnist" / "mnist_uint8.npz") in err


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
