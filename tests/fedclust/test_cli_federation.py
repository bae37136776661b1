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
    ["federation", "invite", "hospital-d", "--url", "coordinator.example.org"],
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


def test_the_member_table_shows_when_each_member_was_last_seen() -> None:
    from datetime import UTC, datetime, timedelta

    from fedclust.cli.federation import members_table
    from fedclust.protocol.wire.messages import ParticipantPublic

    now = datetime(2026, 11, 27, 6, 0, 0, tzinfo=UTC)
    members = [
        ParticipantPublic(id="hospital-a", enrolled=True, n_features=4,
                          allowed_algorithms=["ffcm", "fkm"],
                          last_contact=now - timedelta(minutes=3, seconds=5)),
        ParticipantPublic(id="hospital-b", enrolled=True, n_features=4,
                          last_contact=now - timedelta(days=2, hours=1)),
        ParticipantPublic(id="hospital-c", enrolled=False),
    ]
    lines = members_table(members, now=now).splitlines()
    assert lines[0].split() == ["member", "enrolled", "features", "algorithms", "last", "seen"]
    assert lines[2].split() == [
        "hospital-a", "yes", "4", "ffcm,", "fkm", "2026-11-27", "05:56:55Z", "(3", "min", "ago)"
    ]
    assert lines[3].endswith("2026-11-25 05:00:00Z (2 d ago)")
    assert lines[4].split() == ["hospital-c", "no", "never"]
