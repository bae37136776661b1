"""The simulated set-ups of the model-based algorithms (``fedclust simulate --algorithm
fedcref|fed-distill``, :mod:`fedclust.deep_simulate`): each preset's federation and the job's
parameters the simulator applies beneath the flags given. Data and the registry only (no
numpy, no torch), so that ``fedclust simulate --help`` states the defaults at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedclust.protocol import algorithms

DATASETS = ("digits", "mnist")
#: Classes of either data set (labels 0..9).
N_CLASSES = 10
#: FedCRef's default theta on digits (clusters of tens of rows; see QUICK).
DIGITS_THETA = 0.55
#: The simulated federation of each preset, by algorithm; the job's parameters of a preset are
#: the algorithm's registered preset (``protocol.algorithms``; docs/fedcref.md and
#: docs/fed-distill.md give the sources). "code": the project's quick defaults on digits.
SETUPS: Mapping[str, Mapping[str, Mapping[str, Any]]] = {
    "fed-distill": {
        "code": {"dataset": "digits", "groups": 3, "clients_per_group": 4,
                 "classes_per_group": 3, "samples_per_class": 30, "public_per_class": 20,
                 "test_per_class": 20},
        # Yang & Tae 2023: MNIST, 400 public images per class; the grid's G groups of C
        # classes are set per run (benchmarks/bench_fed_distill_mnist.py).
        "paper": {"dataset": "mnist", "groups": 5, "clients_per_group": 5,
                  "classes_per_group": 2, "samples_per_class": 50, "public_per_class": 400,
                  "test_per_class": 100},
    },
    "fedcref": {
        "code": {"dataset": "digits", "clients": 8, "classes_per_client": (2, 4),
                 "samples_per_class": 30, "pooled": False},
        # Nardi et al., Tables 3-4: 25 clients on MNIST's 70,000 images (train and test
        # pooled), 500 images per client cluster.
        "paper": {"dataset": "mnist", "clients": 25, "classes_per_client": (2, 5),
                  "samples_per_class": 500, "pooled": True},
    },
}
#: The job's parameters the simulated data fix, by algorithm and data set, under every preset:
#: fed-distill's 10 classes and classifier (an MLP on digits' 8x8 images, the authors' CNN on
#: MNIST's); FedCRef starts from each participant's labels ("dirty": --dirtiness of them
#: swapped).
BY_DATA: Mapping[str, Mapping[str, Mapping[str, Any]]] = {
    "fed-distill": {"digits": {"n_classes": N_CLASSES, "classifier": "mlp"},
                    "mnist": {"n_classes": N_CLASSES, "classifier": "cnn"}},
    "fedcref": {"digits": {"initial": "labels"}, "mnist": {"initial": "labels"}},
}
#: The quick set-up's parameters under preset "code", over the registered preset, by algorithm
#: and data set. fed-distill: 30 distillation epochs with the MLP on digits, 50 (the authors'
#: code's) on MNIST. FedCRef: 60 local epochs (over clusters of tens of rows the paper's 20
#: leave the models under-trained and refinement moves rows to other clusters' models: digits,
#: d = 0, final ACC 0.85 with 20, 0.96 with 60), 3 iterations, and theta 0.55 on digits (eq. 2
#: scores fall as clusters grow; digits clusters hold tens of rows: same class ~0.35-0.55,
#: different ~0.6-0.85).
QUICK: Mapping[str, Mapping[str, Mapping[str, Any]]] = {
    "fed-distill": {"digits": {"epochs": 30}, "mnist": {"epochs": 50}},
    "fedcref": {"digits": {"epochs": 60, "max_iterations": 3, "theta": DIGITS_THETA},
                "mnist": {"epochs": 60, "max_iterations": 3}},
}


def job_defaults(algorithm: str, preset: str, dataset: str) -> dict[str, Any]:
    """The job's parameters beneath the flags given: the algorithm's registered ``preset``,
    then :data:`BY_DATA`, then (preset "code") :data:`QUICK`; none for a data set other than
    :data:`DATASETS` (the loader refuses it)."""
    quick = QUICK[algorithm].get(dataset, {}) if preset == "code" else {}
    return {**algorithms.get(algorithm).preset(preset),
            **BY_DATA[algorithm].get(dataset, {}), **quick}
