"""Self-contained invites over real HTTPS (issue 23): ``fedclust federation invite`` prints a
bundle with the coordinator's URL and its CA's SHA-256; an organisation whose
participant.toml names neither enrols with the invite alone and pins that CA; a tampered
fingerprint is refused before anything is sent; an old bare invite still enrols."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from fedclust.cli import main
from fedclust.coordinator.app import create_app
from fedclust.coordinator.settings import AnalystCredential, CoordinatorSettings
from fedclust.crypto.tokens import token_sha256
from fedclust.demo import free_port
from fedclust.infra.tls import TlsSettings, certificate_sha256
from fedclust.participant.config import ParticipantConfig
from fedclust.participant.enrolment import EnrolmentError, enrol, join_target
from fedclust.pki import init_ca, issue
from fedclust.protocol.wire.admin import InviteBundle
from tests._servers import ServerThread

ADMIN_TOKEN = "an-admin-token-of-the-federation"
NEW = "hospital-d"


def _counting() -> httpx.MockTransport:
    """The counting service as far as joining needs it: every member's token accepted."""
    def handle(request: httpx.Request) -> httpx.Response:
        assert request.method == "PUT" and request.url.path == f"/api/v1/participants/{NEW}"
        return httpx.Response(204)

    return httpx.MockTransport(handle)


@dataclass(frozen=True)
class Federation:
    url: str
    ca: Path
    analyst_toml: Path
    folder: Path


@pytest.fixture
def federation(tmp_path: Path) -> Iterator[Federation]:
    ca = init_ca(tmp_path / "ca")
    served = issue("coordinator", tmp_path / "ca", tmp_path / "certs", dns=["localhost"],
                   ips=["127.0.0.1"])
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    tls = TlsSettings.from_table(
        {"certificate": str(served.certificate), "key": str(served.key),
         "ca": str(ca.certificate)}, base=tmp_path,
    )
    settings = CoordinatorSettings(
        counting_url="http://counting.test", counting_token="to-the-counting-service",
        analysts=(AnalystCredential("admin", token_sha256(ADMIN_TOKEN), role="admin"),),
        participants=(), database_url=f"sqlite:///{tmp_path / 'coordinator.db'}",
        tls=tls, public_url=url,
    )
    server = ServerThread(
        create_app(settings, counting_transport=_counting()), port, **tls.uvicorn_options()
    ).start()
    analyst_toml = tmp_path / "analyst.toml"
    analyst_toml.write_text(
        f'[analyst]\ncoordinator_url = "{url}"\ntoken = "{ADMIN_TOKEN}"\n\n'
        f'[tls]\nca = "{ca.certificate}"\n', encoding="utf-8",
    )
    org = tmp_path / "org"
    org.mkdir()
    try:
        yield Federation(url, ca.certificate, analyst_toml, org)
    finally:
        server.stop()


def _invite(fed: Federation, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["federation", "invite", NEW, "--config", str(fed.analyst_toml)]) == 0
    out, err = capsys.readouterr()
    assert "pins the CA with SHA-256" in err
    return out.strip()


def _bare_config(folder: Path) -> Path:
    """participant.toml with neither coordinator_url nor [tls]."""
    path = folder / "participant.toml"
    path.write_text(
        f'[participant]\nid = "{NEW}"\ncounting_url = "http://counting.test"\n\n'
        '[data]\npath = "rows.csv"\n', encoding="utf-8",
    )
    return path


def test_an_invite_alone_enrols_and_pins_the_coordinators_ca(
    federation: Federation, capsys: pytest.CaptureFixture[str]
) -> None:
    invite = _invite(federation, capsys)
    bundle = InviteBundle.decode(invite)
    from cryptography import x509

    expected = certificate_sha256(x509.load_pem_x509_certificate(federation.ca.read_bytes()))
    assert bundle is not None and bundle.participant_id == NEW
    assert (bundle.coordinator_url, bundle.ca_sha256) == (federation.url, expected)

    config = _bare_config(federation.folder)
    assert main(["participant", "enrol", "--invite", invite, "--config", str(config)]) == 0
    assert f"enrolled at {federation.url}" in capsys.readouterr().out
    state = federation.folder / f"state-{NEW}"
    assert (state / "coordinator-ca.pem").read_bytes() == federation.ca.read_bytes()
    # participant run reads the URL and trusts the pinned CA without either in the file.
    loaded = ParticipantConfig.from_file(config)
    assert loaded.coordinator_url == federation.url
    assert loaded.tls.ca == state / "coordinator-ca.pem"
    assert loaded.token is not None
    # The member list shows the newcomer (joined, not enrolled with data yet, never polled).
    assert main(["federation", "members", "--config", str(federation.analyst_toml)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert rows == [[NEW, "no", "never"]]


def test_a_tampered_fingerprint_is_refused_before_anything_is_sent(
    federation: Federation, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = InviteBundle.decode(_invite(federation, capsys))
    assert bundle is not None and bundle.ca_sha256 is not None
    forged = bundle.model_copy(update={"ca_sha256": "0" * 64}).encode()
    config = _bare_config(federation.folder)
    target = join_target(config, invite=forged)
    with pytest.raises(EnrolmentError, match=(
        rf"refusing the coordinator at {federation.url}: its CA certificate has SHA-256 "
        rf"{bundle.ca_sha256}, but the invite pins 0{{64}}"
    )):
        enrol(target, forged)
    assert not target.token_path.exists() and not target.state_dir.exists()
    # The invite was not spent: the untampered one still enrols.
    assert enrol(target, bundle.encode()) == target.token_path


def test_a_bare_invite_still_enrols_where_the_config_names_the_coordinator(
    federation: Federation, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = InviteBundle.decode(_invite(federation, capsys))
    assert bundle is not None
    config = federation.folder / "participant.toml"
    config.write_text(
        f'[participant]\nid = "{NEW}"\ncoordinator_url = "{federation.url}"\n'
        f'counting_url = "http://counting.test"\n\n[tls]\nca = "{federation.ca}"\n\n'
        '[data]\npath = "rows.csv"\n', encoding="utf-8",
    )
    assert main(["participant", "enrol", "--invite", bundle.invite, "--config", str(config)]) == 0
    assert not (federation.folder / f"state-{NEW}" / "coordinator-ca.pem").exists()
    # A bundle naming another coordinator than the config's is refused, naming both.
    other = bundle.model_copy(update={"coordinator_url": "https://elsewhere.test"}).encode()
    with pytest.raises(ValueError, match="the invite names the coordinator https://elsewhere"):
        join_target(config, invite=other)
