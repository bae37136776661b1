"""Peer identity pins: trust on first use, persisted, and keys configured up front."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from fedclust.core.errors import RefusedError
from fedclust.crypto.masking import IdentityKey
from fedclust.participant.config import ParticipantConfig
from fedclust.participant.secure import PeerPins, load_identity


def _b64(key: IdentityKey) -> str:
    return base64.b64encode(key.public_bytes()).decode()


def test_pins_persist_and_a_changed_key_is_refused(tmp_path: Path) -> None:
    a, b = IdentityKey.generate().public_bytes(), IdentityKey.generate().public_bytes()
    PeerPins(tmp_path / "pins.json").check("org-1", a)
    again = PeerPins(tmp_path / "pins.json")  # an agent restart
    again.check("org-1", a)
    with pytest.raises(RefusedError, match="differs from the one pinned"):
        again.check("org-1", b)


def test_a_configured_key_is_pinned_before_first_sight(tmp_path: Path) -> None:
    real, forged = IdentityKey.generate(), IdentityKey.generate()
    pins = PeerPins(None, {"org-1": _b64(real)})
    with pytest.raises(RefusedError, match="org-1"):
        pins.check("org-1", forged.public_bytes())
    pins.check("org-1", real.public_bytes())


def test_the_config_reads_peers_and_refuses_a_malformed_key(tmp_path: Path) -> None:
    key = _b64(IdentityKey.generate())
    base = (
        '[participant]\nid = "org-0"\ncoordinator_url = "http://c"\ncounting_url = "http://n"\n'
        'token = "t"\n[data]\npath = "x.csv"\n'
    )
    good = tmp_path / "good.toml"
    good.write_text(base + f'[peers]\norg-1 = "{key}"\n')
    assert ParticipantConfig.from_file(good).peers == {"org-1": key}
    bad = tmp_path / "bad.toml"
    bad.write_text(base + '[peers]\norg-1 = "not-a-key"\n')
    with pytest.raises(ValueError, match=r"\[peers\] 'org-1'"):
        ParticipantConfig.from_file(bad)


def test_the_identity_key_file_is_created_private_and_reread(tmp_path: Path) -> None:
    path = tmp_path / "id.key"
    first = load_identity(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_identity(path).public_bytes() == first.public_bytes()
    path.write_text("garbage\n")
    with pytest.raises(ValueError, match="not an Ed25519 identity key file"):
        load_identity(path)


def test_the_cli_prints_the_public_key_for_a_peers_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedclust.cli import main

    config = tmp_path / "p.toml"
    config.write_text(
        '[participant]\nid = "org-0"\ncoordinator_url = "http://c"\ncounting_url = "http://n"\n'
        'token = "t"\n[data]\npath = "x.csv"\n'
    )
    assert main(["participant", "identity", "--config", str(config)]) == 0
    key = load_identity(tmp_path / "identity-org-0.key")
    assert capsys.readouterr().out.strip() == f'org-0 = "{_b64(key)}"'
