"""On the CPU the device path gives the results of the code before it (issue 22).

Commit 657d188 added the ``device`` setting (``participant/deep/device.py``) and the split of
torch's CPU threads among participants training in one process. The numbers pinned here come
from its parent, d58723d: ``simulate_fed_distill`` and ``simulate_fedcref`` of
``fedclust.deep_simulate`` (the same arguments, with the same meaning, in both versions) run
on ``TINY_DISTILL`` / ``TINY_FEDCREF`` from a worktree of that commit, the participants'
weights read as :func:`_run` reads them, with torch 2.13.0+cpu
on an AMD EPYC (ATen CPU capability AVX512) under ``torch.set_num_threads(1)``: the thread
count the split gives these 6 participants on that 2-core machine. Today's code runs them with
``device="cpu"`` and ``"auto"`` (the CPU where torch sees no GPU).

Compared:

* the results (groups with their members and truth, ARI, accuracies, FedCRef's iterations and
  each participant's final cluster sizes): exactly. d58723d gave the same at 1, 2, 8 and 16
  threads, today's code at 1, 2, 4 and 8.
* every participant's final float32 weights, by their float64 sum and Euclidean norm, to
  rtol 1e-6 on any CPU and thread count: torch's float32 kernels add in an order set by the
  thread count and the CPU's vector instructions; at 2 to 8 threads (either version) they
  moved by at most 1.0e-7 (relative) from 1 thread's. A learning rate 0.1 % off (1.001e-3)
  leaves the results as they are but moves every one of these by more than 1.6e-5.
* the weights' bytes (SHA-256), where the recording's conditions hold (torch 2.13.0, the same
  CPU vendor and capability, one thread per participant): bit for bit.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

torch = pytest.importorskip("torch")

from fedclust import deep_simulate as ds  # noqa: E402
from fedclust.participant.deep.device import threads_per_participant  # noqa: E402

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="'auto' is a GPU here")
DEVICES = ["cpu", pytest.param("auto", marks=NO_GPU)]
TINY_DISTILL: dict[str, Any] = {
    "groups": 3, "clients_per_group": 2, "classes_per_group": 3, "samples_per_class": 15,
    "public_per_class": 5, "test_per_class": 5, "distance_threshold": 2.0, "temperature": 0.1,
    "distill_epochs": 10, "mode": "clustered", "protection": "none", "seed": 0,
}
TINY_FEDCREF: dict[str, Any] = {
    "clients": 6, "classes_per_client": (2, 4), "samples_per_class": 20, "dirtiness": 0.0,
    "initial": "dirty", "theta": 0.55, "alpha": 75.0, "tau": 0.8, "fedavg_rounds": 2,
    "max_iterations": 2, "refine_with": "all", "local_epochs": 30, "param_bound": 100.0,
    "protection": "none", "seed": 0,
}
PARTICIPANTS = 6
#: (torch version, CPU vendor, ATen CPU capability) of the recording.
RECORDED = ("2.13.0", "AuthenticAMD", "AVX512")
Weights = NDArray[np.float32]

PINNED: dict[str, dict[str, Any]] = {
    "fed-distill": {
        "result": {
            "true_groups": 3, "groups_found": 3, "ari": 1.0,
            "groups": [
                {"members": ["g0-c0", "g0-c1"], "truth": [0, 0], "accuracy": 0.9,
                 "protected": False},
                {"members": ["g1-c0", "g1-c1"], "truth": [1, 1], "accuracy": 1.0,
                 "protected": False},
                {"members": ["g2-c0", "g2-c1"], "truth": [2, 2], "accuracy": 1.0,
                 "protected": False},
            ],
            "accuracy_per_true_group": [0.9, 1.0, 1.0],
            "local_accuracy_per_true_group": [0.8333333333333333, 1.0, 0.7333333333333334],
            "overall_accuracy": 0.9666666666666667,
            "local_overall_accuracy": 0.8555555555555556,
        },
        "sizes": None,
        # (sum, Euclidean norm) of each participant's 7,510 classifier weights.
        "weights": [
            (36.692430433104164, 6.538723482321806), (25.765743411880976, 6.518703457647214),
            (14.097147053733352, 6.463569916756507), (26.071134627949505, 6.606877768124097),
            (34.62315032877086, 6.60406529066739), (34.20808234094147, 6.590894567679955),
        ],
        "sha256": "7f73b2514f37e445afc875657cba46b5708fa9d28cb0ea9a1310df201353833c",
    },
    "fedcref": {
        "result": {
            "true_groups": 10, "groups_found": 1, "ari": 0.1989189189189189,
            "groups": [{"members": ["client-0:2", "client-2:0", "client-4:1", "client-5:0"],
                        "truth": [5, 0, 5, 0], "accuracy": None, "protected": False}],
            "isolated_clusters": 15, "wrong_associations": 2, "initial_accuracy": 1.0,
            "final_accuracy": 0.9527777777777778, "stop_reason": "all_frozen",
            "iterations": [{"iteration": 1, "groups": 1, "isolated_clusters": 15,
                            "wrong_associations": 2, "mean_accuracy": 0.9527777777777778,
                            "frozen": 6}],
        },
        # Rows in each of a participant's final clusters.
        "sizes": [[20, 18, 19, 23], [19, 21], [20, 21, 20, 19], [21, 20, 20, 19],
                  [20, 19, 21], [20, 20]],
        # (sum, Euclidean norm) of all of a participant's autoencoders' weights.
        "weights": [
            (581.0574313472075, 24.79821216668311), (282.9699459178232, 17.522843062752006),
            (532.5638539675156, 24.780818540247378), (555.4128664188561, 24.782166103372653),
            (408.9322574455987, 21.47255055847469), (286.15511685078354, 17.51730593297344),
        ],
        "sha256": "239d0c913896345aba4918dd11b6904b647d2e9796860be6156ad0782ff703e3",
    },
}


def _cpu_vendor() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8").splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def _conditions() -> tuple[str, str, str]:
    return (torch.__version__.split("+")[0], _cpu_vendor(),
            torch.backends.cpu.get_cpu_capability())


@dataclass(frozen=True)
class _Run:
    """A simulation's result document, its participants' final weights (float32 arrays, each
    participant's in a fixed order) and FedCRef's final cluster sizes."""

    doc: ds.DeepSimulationDocument
    weights: list[list[Weights]]
    sizes: list[list[int]] | None


def _float32(arrays: Iterable[Any]) -> list[Weights]:
    return [np.ascontiguousarray(a, dtype=np.float32) for a in arrays]


@functools.cache
def _run(algorithm: str, device: str) -> _Run:
    """Run ``algorithm``'s pinned configuration on ``device``, keeping the federation the
    simulator builds (its participants hold the final models)."""
    name = "distill_federation" if algorithm == "fed-distill" else "fedcref_federation"
    built: list[Any] = []
    real: Callable[..., Any] = getattr(ds, name)

    def keep(*args: Any, **kwargs: Any) -> Any:
        built.append(real(*args, **kwargs))
        return built[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ds, name, keep)
        if algorithm == "fed-distill":
            doc = ds.simulate_fed_distill("digits", device=device, **TINY_DISTILL)
        else:
            doc = ds.simulate_fedcref("digits", device=device, **TINY_FEDCREF)
    assert doc.device == "cpu"
    parts = built[0].participants
    if algorithm == "fed-distill":
        weights = [_float32(p.weights()[k] for k in sorted(p.weights())) for p in parts]
        return _Run(doc, weights, None)
    sizes = [np.bincount(p.labels).tolist() for p in parts]
    return _Run(doc, [_float32(p.fedcref_models()) for p in parts], sizes)


def _summary(weights: Sequence[Sequence[Weights]]) -> NDArray[np.float64]:
    out = []
    for arrays in weights:
        flat = np.concatenate([a.ravel() for a in arrays]).astype(np.float64)
        out.append((flat.sum(), np.sqrt(flat @ flat)))
    return np.array(out)


def _sha256(weights: Sequence[Sequence[Weights]]) -> str:
    digest = hashlib.sha256()
    for arrays in weights:
        for a in arrays:
            digest.update(a.tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ["fed-distill", "fedcref"])
def test_results_equal_the_code_before_the_device_setting(algorithm: str, device: str) -> None:
    run, pinned = _run(algorithm, device), PINNED[algorithm]
    result = run.doc.model_dump()
    for key, value in pinned["result"].items():
        assert result[key] == value, key
    assert run.sizes == pinned["sizes"]
    np.testing.assert_allclose(_summary(run.weights), np.array(pinned["weights"]), rtol=1e-6,
                               atol=0.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("algorithm", ["fed-distill", "fedcref"])
def test_weights_equal_the_code_before_bit_for_bit(algorithm: str, device: str) -> None:
    if _conditions() != RECORDED:
        pytest.skip(f"(torch, CPU vendor, capability) {_conditions()}, recorded {RECORDED}")
    if threads_per_participant(PARTICIPANTS) != 1:
        pytest.skip("the recording trained with one torch thread per participant")
    assert _sha256(_run(algorithm, device).weights) == PINNED[algorithm]["sha256"]
