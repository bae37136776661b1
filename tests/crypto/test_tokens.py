"""Bearer credentials: digests, identification, validation of stored digests."""

from __future__ import annotations

import pytest

from fedclust.crypto.tokens import check_sha256_hex, identify, new_token, token_sha256

ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # FIPS 180-2


def test_digest_known_answer() -> None:
    assert token_sha256("abc") == ABC_SHA256


def test_new_tokens_are_long_and_distinct() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(len(t) >= 43 for t in tokens)  # 32 random bytes in URL-safe base64


def test_identify_finds_the_matching_credential_only() -> None:
    stored = [(token_sha256("alice-token"), "alice"), (token_sha256("bob-token"), "bob")]
    assert identify("bob-token", stored) == "bob"
    assert identify("carol-token", stored) is None
    assert identify("", stored) is None
    assert identify(token_sha256("alice-token"), stored) is None  # the digest is no token


@pytest.mark.parametrize(
    ("value", "message"),
    [("", "non-empty"), (None, "non-empty"), ("abc", "64 hexadecimal"),
     ("alice-token", "not a token")],
)
def test_stored_digests_are_validated(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_sha256_hex(value, where="token_sha256 of 'x'")
    assert check_sha256_hex(ABC_SHA256.upper(), where="w") == ABC_SHA256


def test_a_new_token_never_reads_as_a_command_line_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token drawn with a leading "-" (1 in 64) is drawn again: ``--invite -xyz`` would
    make argparse read the invite as a flag (a full test run met one)."""
    assert not any(new_token().startswith("-") for _ in range(2000))
    drawn = iter(["-leading-dash", "plain_token"])
    monkeypatch.setattr("fedclust.crypto.tokens.secrets.token_urlsafe", lambda n: next(drawn))
    assert new_token() == "plain_token"
