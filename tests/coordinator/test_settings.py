"""coordinator.toml: reading, path resolution, refusing empty secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedclust.coordinator.settings import (
    AnalystCredential,
    CoordinatorSettings,
    ParticipantCredential,
)
from fedclust.crypto.tokens import token_sha256

HASH_A = token_sha256("analyst")
HASH_P = token_sha256("participant")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "coordinator.toml"
    path.write_text(text, encoding="utf-8")
    return path


GOOD = f"""
[coordinator]
port = 8800
database_url = "sqlite:///state/coordinator.db"
counting_url = "http://127.0.0.1:8701"
counting_token = "counting-secret-7q"
task_timeout_seconds = 5

[[analysts]]
name = "alice"
token_sha256 = "{HASH_A}"

[[participants]]
id = "hospital-a"
token_sha256 = "{HASH_P.upper()}"
"""


def test_from_file_reads_everything(tmp_path: Path) -> None:
    s = CoordinatorSettings.from_file(write(tmp_path, GOOD))
    assert s.port == 8800
    assert s.task_timeout_seconds == 5.0
    assert s.database_url == f"sqlite:///{tmp_path.resolve() / 'state' / 'coordinator.db'}"
    assert s.analysts == (AnalystCredential("alice", HASH_A),)
    assert s.participants == (ParticipantCredential("hospital-a", HASH_P),)  # lowercased
    assert "counting-secret-7q" not in repr(s) and HASH_A not in repr(s)


def test_token_sha256_is_the_hex_digest() -> None:
    assert token_sha256("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ('counting_token = "counting-secret-7q"', 'counting_token = ""', "counting_token"),
        (f'token_sha256 = "{HASH_A}"', 'token_sha256 = ""', "token_sha256"),
        (f'token_sha256 = "{HASH_A}"', 'token_sha256 = "abc"', "64 hexadecimal"),
        ('id = "hospital-a"', 'id = "bad id!"', "participant id"),
        ("port = 8800", "port = 0", "port"),
        ("task_timeout_seconds = 5", "task_timeout_seconds = 0", "task_timeout"),
        ("port = 8800", "prot = 8800", r"unknown key\(s\) 'prot' in \[coordinator\]"),
    ],
)
def test_bad_files_are_refused(tmp_path: Path, old: str, new: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CoordinatorSettings.from_file(write(tmp_path, GOOD.replace(old, new)))


def test_shared_tokens_are_refused() -> None:
    with pytest.raises(ValueError, match="its own token"):
        CoordinatorSettings(
            counting_url="http://x", counting_token="t",
            analysts=(AnalystCredential("a", HASH_A),),
            participants=(ParticipantCredential("p", HASH_A),),
        )


def test_an_analyst_role_defaults_to_analyst_and_may_be_admin(tmp_path: Path) -> None:
    s = CoordinatorSettings.from_file(write(tmp_path, GOOD))
    assert s.analysts[0].role == "analyst"
    admin = GOOD.replace('name = "alice"', 'name = "alice"\nrole = "admin"')
    assert CoordinatorSettings.from_file(write(tmp_path, admin)).analysts[0].role == "admin"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('role = "root"', r"\[\[analysts\]\] entry 1 role must be 'analyst' or 'admin'\."),
        (f'[[analysts]]\nname = "alice"\ntoken_sha256 = "{token_sha256("other")}"',
         "analyst names in the configuration must be distinct"),
    ],
    ids=["unknown-role", "duplicate-name"],
)
def test_bad_analyst_entries_are_refused(tmp_path: Path, extra: str, message: str) -> None:
    text = GOOD.replace(f'token_sha256 = "{HASH_A}"', f'token_sha256 = "{HASH_A}"\n{extra}')
    with pytest.raises(ValueError, match=message):
        CoordinatorSettings.from_file(write(tmp_path, text))


@pytest.mark.parametrize("url", ["https://", "http:// x.org", "ftp://x.org", "https:/x.org",
                                 "https://x" + "y" * 2048])
def test_a_public_url_an_invite_could_not_carry_fails_at_load(url: str) -> None:
    with pytest.raises(ValueError, match=r"\[coordinator\] public_url must be an http:// or "
                       r"https:// URL with a host"):
        CoordinatorSettings(counting_url="http://x", counting_token="t", analysts=(),
                            participants=(), public_url=url)


def test_a_public_url_loses_its_trailing_slashes() -> None:
    s = CoordinatorSettings(counting_url="http://x", counting_token="t", analysts=(),
                            participants=(), public_url="https://coord.example:8700/")
    assert s.public_url == "https://coord.example:8700"
