"""``fedclust federation ...`` and ``participant enrol``: argument handling (the calls
themselves run end to end in tests/test_onboarding_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedclust.cli import main
from fedclust.cli.federation import _duration


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("24h", 86400), ("7d", 604800)]
)
def test_expiry_durations(text: str, seconds: int) -> None:
    assert _duration(text) == seconds


@pytest.mark.parametrize("argv", [
    ["federation", "invite", "hospital-d", "--expires", "tomorrow"],
    ["federation", "invite", "hospital-d", "--expires", "0h"],
    ["participant", "enrol", "--config", "participant.toml"],  # no --invite
])
def test_bad_arguments_exit_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error:" in err


def test_an_unreadable_participant_config_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = f"{tmp_path}/nowhere.toml"
    assert main(["participant", "enrol", "--invite", "x" * 43, "--config", missing]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedclust participant enrol: error:") and "nowhere.toml" in err
