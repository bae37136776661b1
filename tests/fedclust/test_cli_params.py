"""The flags made from the registered parameters models (``fedclust.cli._params``): declared
on the fields, one list for ``job submit`` and ``simulate``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedclust.cli import _parser, main
from fedclust.cli._params import flag_fields, params_from_flags
from fedclust.core.models import Flag
from fedclust.protocol import algorithms
from fedclust.protocol.algorithms.fed_distill_params import DistillParams

SIMULATE = ["simulate", "--dataset", "digits"]
SUBMIT = ["job", "submit", "--participants", "a,b,c"]


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_a_flag_is_declared_on_its_field_and_stays_out_of_the_schema() -> None:
    assert Flag("--distill-epochs") in DistillParams.model_fields["epochs"].metadata
    assert "distill-epochs" not in json.dumps(DistillParams.model_json_schema())
    fields = dict(flag_fields("fed-distill"))
    assert "public" not in fields  # a model (the public array): given otherwise
    assert fields["epochs"] == ("--distill-epochs",)
    assert fields["n_classes"] == ("--n-classes",)
    assert dict(flag_fields("fedcref"))["epochs"] == ("--epochs", "--local-epochs")


def test_every_field_is_a_flag_of_both_commands(capsys: pytest.CaptureFixture[str]) -> None:
    texts = {"simulate": _help(capsys, *SIMULATE), "submit": _help(capsys, *SUBMIT)}
    made = [f for a in algorithms.names() for _, flags in flag_fields(a) for f in flags]
    assert len(made) >= 20
    for command, text in texts.items():
        missing = [f for f in made if f"{f} " not in text]
        assert not missing, (command, missing)


@pytest.mark.parametrize("argv", [*(["--algorithm", "fedcref", "--hidden", w]
                                    for w in ("0,5", "1,2,3,4,5,6,7,8,9", "a,b"))])
@pytest.mark.parametrize("command", [SIMULATE, SUBMIT])
def test_widths_are_read_within_the_models_bounds(
    capsys: pytest.CaptureFixture[str], command: list[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args([*command, *argv])
    assert "--hidden" in (err := capsys.readouterr().err)
    assert "give 1 to 8 integers from 1 to 100000 as H,H,..." in err
    args = _parser().parse_args([*command, "--algorithm", "fedcref", "--hidden", "50,20"])
    assert params_from_flags(args, "fedcref") == {"hidden": (50, 20)}


def test_simulate_reads_the_models_flags_with_its_own_spellings() -> None:
    argv = [*SIMULATE, "--algorithm", "fedcref", "--local-epochs", "7", "--initial", "dirty",
            "--alpha", "70", "--k-max", "4"]
    args = _parser().parse_args(argv)
    assert params_from_flags(args, "fedcref", preset=False) == {
        "epochs": 7, "initial": "labels", "alpha": 70.0, "k_max": 4,
    }
    args = _parser().parse_args([*argv, "--epochs", "8"])
    with pytest.raises(ValueError, match="give --epochs or --local-epochs, not both"):
        params_from_flags(args, "fedcref")
    args = _parser().parse_args([*SIMULATE, "--algorithm", "fed-distill", "--local-epochs", "7",
                                 "--distill-epochs", "2", "--preset", "paper"])
    assert params_from_flags(args, "fed-distill", preset=False) == {"local_epochs": 7, "epochs": 2}
    assert params_from_flags(args, "fed-distill")["learning_rate"] == 1e-4  # the preset's


def test_simulate_help_states_the_simulators_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _help(capsys, *SIMULATE)
    assert "(default 0.55 on digits, 0.25 on mnist; paper preset 0.2)" in text  # --theta
    assert "(default 30 on digits, 50 on mnist; paper preset 40)" in text  # --distill-epochs
    assert "(default mlp on digits, cnn on mnist)" in text  # --classifier
    assert "'dirty' is 'labels'. (default labels)" in text  # --initial
    submit = _help(capsys, *SUBMIT)
    assert "(default 0.2)" in submit and "0.55 on digits" not in submit  # the model's


@pytest.mark.parametrize(("command", "argv", "message"), [
    (SIMULATE, ["--algorithm", "fed-distill", "--epochs", "3"],
     "--epochs applies only to --algorithm fedcref, not fed-distill"),
    (SIMULATE, ["--algorithm", "kfed", "--k", "3", "--local-epochs", "3"],
     "--local-epochs applies only to --algorithm fed-distill or fedcref, not kfed"),
])
def test_a_flag_of_another_algorithms_parameters_is_refused(
    capsys: pytest.CaptureFixture[str], command: list[str], argv: list[str], message: str
) -> None:
    assert main([*command, *argv]) == 2
    assert message in capsys.readouterr().err


def test_job_submit_refuses_another_algorithms_parameters_flag() -> None:
    from fedclust.cli.job import _job_from_flags

    args = _parser().parse_args([*SUBMIT, "--algorithm", "fedcref", "--distill-epochs", "3"])
    with pytest.raises(ValueError, match="--distill-epochs applies only to --algorithm "
                                         "fed-distill, not fedcref"):
        _job_from_flags(args, args.participants)


#: A fresh interpreter: toy-tuned-fcm (tests.contract.toy_params) is registered before the wire
#: format is made; its model's field is a flag of simulate with no other edit.
_TOY = """
import json, sys
from fedclust.protocol import algorithms
from tests.contract import toy_params
algorithms.register(toy_params.SPEC)
from fedclust.cli import main
main(["simulate", "--dataset", "motivational", "--algorithm", toy_params.SPEC.name, "--k", "3",
      "--seed", "4", "--protection", "none", "--json", *sys.argv[1:]])
"""


def test_a_new_parameters_field_is_a_flag_of_simulate() -> None:
    def run(*flags: str) -> list[list[float]]:
        done = subprocess.run(
            [sys.executable, "-c", _TOY, *flags], cwd=Path(__file__).resolve().parents[2],
            capture_output=True, text=True, timeout=150, check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        centers: list[list[float]] = json.loads(done.stdout)["sweep"][0]["centers"]
        return centers

    full, preset, default = run("--damping", "1.0"), run("--preset", "undamped"), run()
    assert full == preset
    assert full != default
