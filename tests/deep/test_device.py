"""The model-based algorithms' ``device`` setting, thread count and presets (issue 22).

On a machine without a GPU: ``cpu`` gives exactly the results of the code's default path,
``auto`` runs on the CPU and says so, and ``cuda`` is a clear error. The GPU path itself
needs a GPU (benchmarks/bench_*_mnist.py --device cuda).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fedclust import deep_simulate as ds  # noqa: E402
from fedclust.cli import main  # noqa: E402
from fedclust.coordinator.distillation import run_fed_distill  # noqa: E402
from fedclust.data.loaders import shared_datasets_dir  # noqa: E402
from fedclust.participant.config import ParticipantConfig  # noqa: E402
from fedclust.participant.deep import autoencoder as ae  # noqa: E402
from fedclust.participant.deep.device import (  # noqa: E402
    check_device,
    resolve_device,
    threads_per_participant,
)
from fedclust.protocol import algorithms  # noqa: E402
from fedclust.protocol.algorithms.fed_distill_params import DistillParams  # noqa: E402
from fedclust.protocol.algorithms.fedcref_params import FedCRefParams  # noqa: E402
from fedclust.protocol.maths.fedcref import AutoencoderSpec  # noqa: E402
from fedclust.protocol.wire import messages as msg  # noqa: E402

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
TINY_DISTILL: dict[str, Any] = {
    "groups": 2, "clients_per_group": 2, "classes_per_group": 3, "samples_per_class": 15,
    "public_per_class": 5, "test_per_class": 5, "distill_epochs": 2, "protection": "none",
}
TINY_FEDCREF: dict[str, Any] = {
    "clients": 4, "samples_per_class": 15, "fedavg_rounds": 1, "max_iterations": 1,
    "local_epochs": 3, "protection": "none",
}


@pytest.mark.parametrize("setting", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_device_spellings(setting: str) -> None:
    assert check_device(setting) == setting


@pytest.mark.parametrize("setting", ["gpu", "CUDA", "cuda:", "cuda:x", "", 0, None])
def test_bad_device_spelling_names_the_setting(setting: object) -> None:
    with pytest.raises(ValueError, match=r"--device must be auto, cpu, cuda or cuda:N"):
        check_device(setting, where="--device")


@NO_GPU
def test_auto_is_the_cpu_and_a_gpu_asked_without_one_is_a_clear_error() -> None:
    assert resolve_device("auto") == torch.device("cpu")
    for setting in ("cuda", "cuda:1"):
        with pytest.raises(ValueError, match=r"asks for a CUDA GPU, but torch sees none"):
            resolve_device(setting, where="[model] device")


def test_threads_split_the_cores_between_concurrent_participants() -> None:
    assert threads_per_participant(25, cores=16) == 1
    assert threads_per_participant(4, cores=16) == 4
    assert threads_per_participant(3, cores=16) == 5
    assert threads_per_participant(1, cores=2) == 2


def test_autoencoder_on_the_cpu_device_equals_the_default_path_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    X = rng.random((120, 16))
    spec = AutoencoderSpec(16, (8, 4))
    start = ae.init_params(spec, seed=1)
    cfg = ae.TrainConfig(epochs=3)
    default = ae.train(spec, start, X, config=cfg, seed=2)
    on_cpu = ae.train(spec, start, X, config=cfg, seed=2, device=torch.device("cpu"))
    np.testing.assert_array_equal(on_cpu, default)
    assert not np.array_equal(default, start), "training moved the parameters"
    np.testing.assert_array_equal(
        ae.reconstruction_errors(spec, default, X, torch.device("cpu")),
        ae.reconstruction_errors(spec, default, X),
    )
    np.testing.assert_array_equal(
        ae.embed(spec, default, X, torch.device("cpu")), ae.embed(spec, default, X)
    )


def _same(a: ds.DeepSimulationDocument, b: ds.DeepSimulationDocument) -> None:
    keys = ("ari", "groups", "overall_accuracy", "local_overall_accuracy",
            "accuracy_per_true_group", "initial_accuracy", "final_accuracy",
            "isolated_clusters", "iterations")
    for key in keys:
        assert getattr(a, key) == getattr(b, key), key


@NO_GPU
def test_simulations_on_cpu_equal_auto_which_reports_the_cpu() -> None:
    before = torch.get_num_threads()
    cpu = ds.simulate_fed_distill("digits", device="cpu", **TINY_DISTILL)
    auto = ds.simulate_fed_distill("digits", device="auto", **TINY_DISTILL)
    assert (cpu.device, auto.device) == ("cpu", "cpu")
    assert cpu.overall_accuracy is not None and cpu.ari == 1.0
    _same(cpu, auto)
    assert torch.get_num_threads() == before, "the run restores torch's thread count"
    cpu_ref = ds.simulate_fedcref("digits", device="cpu", **TINY_FEDCREF)
    auto_ref = ds.simulate_fedcref("digits", **TINY_FEDCREF)
    assert (cpu_ref.device, auto_ref.device) == ("cpu", "cpu")
    _same(cpu_ref, auto_ref)
    assert "device cpu" in ds.format_deep_result(auto_ref)


@NO_GPU
def test_cli_device_cuda_without_a_gpu_is_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["simulate", "--dataset", "digits", "--algorithm", "fedcref", "--device",
                   "cuda"])
    err = capsys.readouterr().err
    assert status == 2 and "--device = 'cuda' asks for a CUDA GPU" in err
    status = main(["simulate", "--dataset", "digits", "--algorithm", "fed-distill",
                   "--device", "gpu"])
    assert status == 2 and "--device must be auto, cpu, cuda or cuda:N" in capsys.readouterr().err


HEAD = (
    '[participant]\nid = "org-a"\ncoordinator_url = "http://coordinator"\n'
    'counting_url = "http://counting"\ntoken = "tok-org-a-0123456789"\n'
    '[data]\npath = "rows.csv"\n'
)


def _config(folder: Path, extra: str) -> ParticipantConfig:
    file = folder / "participant.toml"
    file.write_text(HEAD + extra, encoding="utf-8")
    return ParticipantConfig.from_file(file)


@NO_GPU
def test_agent_start_refuses_a_gpu_it_lacks_and_auto_logs_the_cpu(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from fedclust.participant.agent import _log_model_device

    with pytest.raises(ValueError, match=r"\[model\] device = 'cuda:0' asks for a CUDA GPU"):
        _log_model_device(_config(tmp_path, '[model]\ndevice = "cuda:0"\n'))
    with caplog.at_level("INFO"):
        _log_model_device(_config(tmp_path, ""))
        resolve_device("auto", where="[model] device")
    assert "[model] device = 'auto'" in caplog.text
    assert "[model] device = 'auto': training on cpu" in caplog.text


def test_agent_config_model_device(tmp_path: Path) -> None:
    assert _config(tmp_path, "").device == "auto"
    assert _config(tmp_path, '[model]\ndevice = "cuda:1"\n').device == "cuda:1"
    with pytest.raises(ValueError, match=r"\[model\] device must be auto, cpu, cuda or cuda:N"):
        _config(tmp_path, '[model]\ndevice = "gpu"\n')
    with pytest.raises(ValueError, match="threads"):
        _config(tmp_path, "[model]\nthreads = 4\n")


def test_presets_are_values_of_the_params_models() -> None:
    public = msg.WireArray.of(np.zeros((2, 4)))
    paper = algorithms.get("fed-distill").preset("paper")
    params = DistillParams(public=public, n_classes=10, **paper)
    assert (params.learning_rate, params.batch_size, params.local_epochs, params.epochs) == (
        1e-4, 128, 25, 40)
    code = DistillParams(public=public, n_classes=10,
                             **algorithms.get("fed-distill").preset("code"))
    assert (code.learning_rate, code.batch_size, code.local_epochs) == (1e-3, None, 30)
    fedcref = FedCRefParams(**algorithms.get("fedcref").preset("paper"))
    assert (fedcref.epochs, fedcref.theta, fedcref.alpha) == (20, 0.2, 75.0)
    with pytest.raises(ValueError, match=r"'best' is not one of fedcref's presets \(code, paper\)"):
        algorithms.get("fedcref").preset("best")


class _Recorder:
    """A participant that records the tasks it is asked (its soft predictions uniform)."""

    name = "p"
    n_features = 4

    def __init__(self) -> None:
        self.tasks: list[msg.TaskSpec] = []

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        self.tasks.append(spec)
        if isinstance(spec, msg.DistillSoftTask):
            return msg.DistillSoftReply(
                soft_sum=msg.WireArray.of(np.full((spec.public.shape[0], 3), 1 / 3)),
                members=msg.WireArray.of(np.ones(1)),
            )
        return msg.AckReply()


def test_the_jobs_training_hyper_parameters_reach_the_participants_tasks() -> None:
    public = msg.WireArray.of(np.zeros((2, 4)))
    for preset, local, step in (("code", (30, 1e-3, 32), (1e-3, 64)),
                                ("paper", (25, 1e-4, 128), (1e-4, 128))):
        params = DistillParams(public=public, n_classes=3, mode="global",
                                   **algorithms.get("fed-distill").preset(preset))
        remote = _Recorder()
        run_fed_distill([remote], params, seed=0)
        train, _, distill = remote.tasks
        assert isinstance(train, msg.DistillTrainTask)
        assert isinstance(distill, msg.DistillStepTask)
        assert (train.max_epochs, train.learning_rate, train.batch_size) == local
        assert (distill.learning_rate, distill.batch_size) == step


def test_paper_preset_with_overrides_runs_and_reports_its_values() -> None:
    doc = ds.simulate_fed_distill("digits", preset="paper", **{**TINY_DISTILL, "local_epochs": 2})
    assert doc.preset == "paper"
    assert (doc.params["learning_rate"], doc.params["batch_size"]) == (1e-4, 128)
    assert (doc.params["local_epochs"], doc.params["distill_epochs"]) == (2, 2)  # overridden
    assert doc.params["public_per_class"] == 5
    with pytest.raises(ValueError, match="--preset must be code or paper"):
        ds.simulate_fed_distill("digits", preset="papers", **TINY_DISTILL)


@pytest.mark.skipif(
    shared_datasets_dir() is None or not (shared_datasets_dir() / ds.MNIST_FILE).is_file(),  # type: ignore[operator]
    reason="MNIST not in the shared datasets (set FEDCLUST_DATASETS)",
)
def test_fedcref_paper_federation_needs_mnist_train_and_test_pooled() -> None:
    setup = dict(ds.SETUPS["fedcref"]["paper"])
    kwargs = {"clients": setup["clients"], "samples_per_class": setup["samples_per_class"],
              "classes_per_client": setup["classes_per_client"], "dirtiness": 0.0, "seed": 0}
    with pytest.raises(ValueError, match="too few rows of class"):
        ds.fedcref_federation(ds.load_dataset("mnist"), **kwargs)
    pooled = ds.load_dataset("mnist", pooled=True)
    assert pooled.X.shape == (70_000, 784) and pooled.X_test is None
    fed = ds.fedcref_federation(pooled, device="cpu", **kwargs)
    assert len(fed.participants) == 25 and fed.true_k == 10
    assert all(X.shape[0] % 500 == 0 for X, _ in fed.rows)


def test_job_submit_preset_under_the_flags_given() -> None:
    from fedclust.cli import _parser
    from fedclust.cli.job import _job_from_flags

    argv = ["job", "submit", "--participants", "a,b,c", "--algorithm", "fedcref", "--seed", "1"]
    paper = _job_from_flags(*_args(_parser(), [*argv, "--preset", "paper", "--theta", "0.3"]))
    fedcref = paper.params(FedCRefParams)
    assert (fedcref.epochs, fedcref.alpha, fedcref.fedavg_rounds) == (20, 75.0, 15)
    assert fedcref.theta == 0.3  # the flag given overrides the preset
    code = _job_from_flags(*_args(_parser(), [*argv, "--preset", "code"]))
    # the authors' code's
    assert code.params(FedCRefParams) == FedCRefParams(theta=0.25, tau=0.85)


def _args(parser: Any, argv: list[str]) -> tuple[Any, list[str]]:
    args = parser.parse_args(argv)
    return args, args.participants
