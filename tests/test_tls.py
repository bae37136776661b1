"""TLS and mutual TLS over real sockets: uvicorn servers on loopback with real certificates.

- a whole federation written with ``tls="mutual"`` (certificates of :mod:`fedclust.pki`) runs a
  job: agents, the analyst and the coordinator (towards the counting service) all verify the
  servers against the federation CA and present their own certificates;
- a client trusting another CA, and a server with an expired certificate, are refused;
- under mutual TLS a client without a certificate is refused at the handshake, and every
  credential counts only with its holder's certificate: a participant's token with another
  organisation's (valid) certificate, the coordinator's token with a member's certificate at
  the counting service, an analyst's or admin's token with a member's certificate at the
  coordinator, all get 403 (before a body is read), while the matching pairs are served.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import HTTPException

from fedclust import pki
from fedclust.client import AnalystClient, AnalystConfig
from fedclust.config_files import FederationFiles, new_credential, write_federation
from fedclust.coordinator.app import create_app as create_coordinator
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.counting.api import CoordinatorIdentity, caller_of
from fedclust.counting.app import create_app as create_counting
from fedclust.counting.db import CountingStore
from fedclust.counting.members import Members
from fedclust.counting.settings import CountingSettings
from fedclust.crypto.tokens import token_sha256
from fedclust.data import synthetic
from fedclust.demo import free_port as _free_port
from fedclust.infra.tls import CLIENT_KEYS, COUNTING_KEYS, TlsSettings, certificate_mismatch
from fedclust.participant.agent import run_agent
from fedclust.participant.config import ParticipantConfig
from fedclust.protocol.wire.messages import JobCreate
from tests._servers import ServerThread

IDS = ("hospital-a", "hospital-b", "hospital-c")


class TlsServer(ServerThread):
    """A uvicorn server for ``app`` on a free loopback port, served as ``tls`` says."""

    def __init__(self, app: Any, tls: TlsSettings, port: int = 0) -> None:
        super().__init__(app, port, **tls.uvicorn_options())

    def __enter__(self) -> TlsServer:
        self.start()
        return self

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@dataclass
class Federation:
    files: FederationFiles
    coordinator: TlsServer
    counting: TlsServer
    admin_token: str = ""

    @property
    def pki(self) -> Path:
        return self.files.root / "pki"

    def client(self, token: str, certificate_of: str | None, url: str) -> httpx.Client:
        """An httpx client with ``token`` presenting ``certificate_of``'s certificate."""
        tls = TlsSettings(
            ca=self.pki / "ca.pem",
            certificate=None if certificate_of is None else self.pki / f"{certificate_of}.pem",
            key=None if certificate_of is None else self.pki / f"{certificate_of}-key.pem",
        )
        return httpx.Client(
            base_url=url + "/api/v1", headers={"Authorization": f"Bearer {token}"},
            verify=tls.httpx_verify(), timeout=10,
        )

    def participant_client(
        self, token_of: str, certificate_of: str | None, url: str
    ) -> httpx.Client:
        """An httpx client with ``token_of``'s token presenting ``certificate_of``'s cert."""
        config = ParticipantConfig.from_file(self.files.participants[token_of])
        assert config.token is not None
        return self.client(config.token, certificate_of, url)


def write_mutual(root: Path, *, seed: int) -> FederationFiles:
    """A loopback federation of ``IDS`` under mutual TLS, with shares of the motivational
    example."""
    data = {}
    for pid, (X, _y) in zip(IDS, synthetic.motivational(seed=seed), strict=True):
        np.savetxt(root / f"{pid}.csv", X, fmt="%.17g", delimiter=",", header="x,y", comments="")
        data[pid] = f"{pid}.csv"
    return write_federation(
        root, data=data, columns=["x", "y"], coordinator_port=_free_port(),
        counting_port=_free_port(), task_timeout_seconds=60, tls="mutual",
    )


@contextmanager
def serve_mutual(
    files: FederationFiles, *, wrap: Callable[[str, Any], Any] = lambda _name, app: app
) -> Iterator[tuple[TlsServer, TlsServer]]:
    """The coordinator and counting service of ``files`` (each app passed through
    ``wrap(name, app)``) on their ports, and every agent in a thread; yields the servers."""
    counting_settings = CountingSettings.from_file(files.counting)
    coordinator_settings = CoordinatorSettings.from_file(files.coordinator)
    stop = threading.Event()
    agents = [
        threading.Thread(
            target=run_agent, args=(ParticipantConfig.from_file(path),),
            kwargs={"stop": stop, "poll_wait": 2.0}, daemon=True,
        )
        for path in files.participants.values()
    ]
    with (
        TlsServer(
            wrap("counting", create_counting(counting_settings)), counting_settings.tls,
            _port(files.counting_url),
        ) as counting,
        TlsServer(
            wrap("coordinator", create_coordinator(coordinator_settings)),
            coordinator_settings.tls, _port(files.coordinator_url),
        ) as coordinator,
    ):
        for agent in agents:
            agent.start()
        try:
            yield coordinator, counting
        finally:
            stop.set()
            for agent in agents:
                agent.join(timeout=30)


def add_admin(files: FederationFiles, name: str = "root") -> str:
    """Add an admin ``name`` to the federation's coordinator, with a certificate of its CA
    issued under that name; its token."""
    credential = new_credential()
    with files.coordinator.open("a", encoding="utf-8") as config:
        config.write(f'\n[[analysts]]\nname = "{name}"\nrole = "admin"\n'
                     f'token_sha256 = "{credential.token_sha256}"\n')
    pki.issue(name, files.root / "pki", files.root / "pki")
    return credential.token


@pytest.fixture(scope="module")
def mutual(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """Coordinator, counting service and three agents, all under mutual TLS, and an admin."""
    files = write_mutual(tmp_path_factory.mktemp("mtls"), seed=3)
    admin_token = add_admin(files)
    with serve_mutual(files) as (coordinator, counting):
        yield Federation(files, coordinator, counting, admin_token)


def test_a_job_runs_under_mutual_tls(mutual: Federation) -> None:
    config = AnalystConfig.from_file(mutual.files.analyst)
    assert config.coordinator_url.startswith("https://")
    with AnalystClient(config) as client:
        client.wait_enrolled(list(IDS), timeout=60)
        job = client.submit(
            JobCreate(algorithm="ffcm", participants=list(IDS), k=2, seed=1, max_rounds=10)
        )
        job = client.follow(job.id, poll=0.05, timeout=120)
    assert job.state == "succeeded", job.error


def test_a_participant_with_its_own_certificate_is_served(mutual: Federation) -> None:
    with mutual.participant_client("hospital-a", "hospital-a", mutual.coordinator.url) as http:
        response = http.get("/tasks/next", params={"wait": 0})
    assert response.status_code in (200, 204), response.text


def test_another_organisations_certificate_is_refused_by_the_coordinator(
    mutual: Federation,
) -> None:
    with mutual.participant_client("hospital-a", "hospital-b", mutual.coordinator.url) as http:
        responses = [http.get("/tasks/next", params={"wait": 0}),
                     http.get("/audit/heads/hospital-a")]
    for response in responses:
        assert response.status_code == 403
        assert "certificate does not name participant 'hospital-a'" in response.json()["detail"]


def test_another_organisations_certificate_is_refused_by_the_counting_service(
    mutual: Federation,
) -> None:
    body = {"job_id": "no-such-job", "count": 5}
    with mutual.participant_client("hospital-a", "hospital-b", mutual.counting.url) as http:
        wrong = http.post("/jobs/no-such-job/counts", json=body)
    with mutual.participant_client("hospital-a", "hospital-a", mutual.counting.url) as http:
        right = http.post("/jobs/no-such-job/counts", json=body)
    assert wrong.status_code == 403
    assert "certificate does not name participant" in wrong.json()["detail"]
    # With its own certificate the same call passes authentication and fails on the job.
    assert "certificate" not in right.json()["detail"]


# -- every credential bound to its holder's certificate ----------------------------------------
def test_the_coordinators_token_with_a_members_certificate_is_refused_by_the_counting_service(
    mutual: Federation,
) -> None:
    """The attack of issue 20: a member holding the coordinator's counting token invents a
    member (``PUT /participants/evil``) or reads a total."""
    token = CoordinatorSettings.from_file(mutual.files.coordinator).counting_token
    invented = {"token_sha256": "ab" * 32}
    with mutual.client(token, "hospital-a", mutual.counting.url) as http:
        put = http.put("/participants/evil", json=invented)  # a body: the guard refuses
        total = http.get("/jobs/no-such-job/total")  # no body: the route's dependency does
    for refused in (put, total):
        assert refused.status_code == 403, refused.text
        assert "does not name coordinator 'coordinator'" in refused.json()["detail"]
    assert put.headers["connection"] == "close"  # the body was never read
    with mutual.client(token, "coordinator", mutual.counting.url) as http:
        served = http.get("/jobs/no-such-job/total")
    assert served.status_code == 404, served.text  # authenticated, refused for the job


def test_a_participants_token_with_another_certificate_gets_no_paillier_key(
    mutual: Federation,
) -> None:
    with mutual.participant_client("hospital-a", "hospital-b", mutual.counting.url) as http:
        wrong = http.get("/jobs/no-such-job/paillier-key")
    with mutual.participant_client("hospital-a", "hospital-a", mutual.counting.url) as http:
        right = http.get("/jobs/no-such-job/paillier-key")
    assert wrong.status_code == 403
    assert "does not name participant 'hospital-a'" in wrong.json()["detail"]
    assert right.status_code == 404, right.text  # authenticated, refused for the job


@pytest.mark.parametrize("role", ["analyst", "admin"])
def test_an_analysts_token_with_a_members_certificate_is_refused_by_the_coordinator(
    mutual: Federation, role: str
) -> None:
    name, token = (
        ("analyst", mutual.files.analyst_token) if role == "analyst"
        else ("root", mutual.admin_token)
    )
    job = {"algorithm": "ffcm", "participants": list(IDS), "k": 2}
    for certificate_of in ("hospital-a", "analyst" if role == "admin" else "root"):
        with mutual.client(token, certificate_of, mutual.coordinator.url) as http:
            listed = http.get("/jobs")
            submitted = http.post("/jobs", json=job)
        for refused in (listed, submitted):
            assert refused.status_code == 403, refused.text
            assert f"does not name {role} {name!r}" in refused.json()["detail"]
        assert submitted.headers["connection"] == "close"
    with mutual.client(token, name, mutual.coordinator.url) as http:
        assert http.get("/jobs").status_code == 200
        if role == "admin":
            invited = http.post("/admin/invitations", json={"participant_id": "hospital-z"})
            assert invited.status_code == 201, invited.text


@pytest.mark.parametrize("service", ["coordinator", "counting"])
def test_a_client_without_a_certificate_is_refused_at_the_handshake(
    mutual: Federation, service: str
) -> None:
    url = mutual.coordinator.url if service == "coordinator" else mutual.counting.url
    with (
        mutual.participant_client("hospital-a", None, url) as http,
        pytest.raises(httpx.TransportError),
    ):
        http.get("/tasks/next", params={"wait": 0})


def test_an_analyst_trusting_another_ca_is_refused(
    mutual: Federation, tmp_path: Path
) -> None:
    other = pki.init_ca(tmp_path / "other")
    good = AnalystConfig.from_file(mutual.files.analyst)
    config = AnalystConfig(good.coordinator_url, good.token, TlsSettings(ca=other.certificate))
    with AnalystClient(config) as client, pytest.raises(httpx.ConnectError, match="verify"):
        client.participants()


def test_a_server_with_an_expired_certificate_is_refused(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme", reason="the expired certificate comes from trustme")
    ca = trustme.CA()
    now = dt.datetime.now(dt.UTC)
    leaf = ca.issue_cert(
        "127.0.0.1", not_before=now - dt.timedelta(days=30), not_after=now - dt.timedelta(days=1)
    )
    server_cert, server_key, ca_file = (
        tmp_path / "server.pem", tmp_path / "server-key.pem", tmp_path / "ca.pem"
    )
    leaf.cert_chain_pems[0].write_to_path(str(server_cert))
    leaf.private_key_pem.write_to_path(str(server_key))
    ca.cert_pem.write_to_path(str(ca_file))
    settings = CountingSettings(
        coordinator_token_sha256="0" * 64, database_url=f"sqlite:///{tmp_path / 'c.db'}",
        tls=TlsSettings(certificate=server_cert, key=server_key),
    )
    client_tls = TlsSettings(ca=ca_file)
    with TlsServer(create_counting(settings), settings.tls) as server:
        with (
            httpx.Client(verify=client_tls.httpx_verify()) as http,
            pytest.raises(httpx.ConnectError, match="expired"),
        ):
            http.get(server.url + "/api/v1/health")
        # Control: the server answers a client that skips verification, so the refusal
        # above is the client's verdict on the certificate.
        with httpx.Client(verify=False) as http:
            assert http.get(server.url + "/api/v1/health").status_code == 200


def test_a_client_with_the_right_ca_reaches_a_tls_service(tmp_path: Path) -> None:
    ca = pki.init_ca(tmp_path)
    server = pki.issue("counting", tmp_path, tmp_path, dns=["localhost"], ips=["127.0.0.1"])
    settings = CountingSettings(
        coordinator_token_sha256="0" * 64, database_url=f"sqlite:///{tmp_path / 'c.db'}",
        tls=TlsSettings(certificate=server.certificate, key=server.key),
    )
    with (
        TlsServer(create_counting(settings), settings.tls) as served,
        httpx.Client(verify=TlsSettings(ca=ca.certificate).httpx_verify()) as http,
    ):
        response = http.get(served.url + "/api/v1/health")
    assert response.status_code == 200


def test_counter_serve_serves_mutual_tls_from_its_config(mutual: Federation) -> None:
    """``fedclust counter serve`` with the federation's ``counting.toml`` (on a new port)."""
    config = mutual.files.root / "counting-cli.toml"
    port = _free_port()
    text = mutual.files.counting.read_text().replace(
        f"port = {_port(mutual.files.counting_url)}", f"port = {port}"
    ).replace("counting.db", "counting-cli.db")
    config.write_text(text)
    url = f"https://127.0.0.1:{port}/api/v1/health"
    with (mutual.files.root / "counting-cli.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fedclust", "counter", "serve", "--config", str(config)],
            stdout=log, stderr=subprocess.STDOUT, cwd=mutual.files.root,
        )
    try:
        with mutual.participant_client("hospital-a", "hospital-a", url) as http:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, "the counting service exited"
                try:
                    response = http.get(url)
                    break
                except httpx.ConnectError:
                    assert time.monotonic() < deadline, "the counting service did not start"
                    time.sleep(0.1)
        assert response.status_code == 200
        with (
            mutual.participant_client("hospital-a", None, url) as http,
            pytest.raises(httpx.TransportError),
        ):
            http.get(url)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- configuration -------------------------------------------------------------------------------
def test_tls_paths_resolve_against_the_config_file(mutual: Federation) -> None:
    tls = CoordinatorSettings.from_file(mutual.files.coordinator).tls
    assert tls.certificate == mutual.pki / "coordinator.pem"
    assert tls.client_ca == mutual.pki / "ca.pem"
    assert tls.verifies_clients
    participant = ParticipantConfig.from_file(mutual.files.participants["hospital-b"]).tls
    assert participant.certificate == mutual.pki / "hospital-b.pem"
    assert not participant.verifies_clients


def test_a_missing_file_and_a_lone_certificate_are_refused(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("x")
    with pytest.raises(ValueError, match=r"\[tls\] key: no file at"):
        TlsSettings.from_table({"certificate": "cert.pem", "key": "nope.pem"}, base=tmp_path)
    with pytest.raises(ValueError, match="both certificate and key"):
        TlsSettings.from_table({"certificate": "cert.pem"}, base=tmp_path)
    with pytest.raises(ValueError, match="unknown key"):
        TlsSettings.from_table(
            {"client_ca": "cert.pem"}, base=tmp_path, allowed=CLIENT_KEYS
        )
    with pytest.raises(ValueError, match="no certificate and key to serve"):
        TlsSettings.from_table({"client_ca": "cert.pem"}, base=tmp_path)
    with pytest.raises(ValueError, match=r"\[tls\] ca: .*cert.pem holds no PEM CA certificate"):
        TlsSettings.from_table({"ca": "cert.pem"}, base=tmp_path)


def test_a_key_of_another_certificate_is_refused_when_the_config_is_read(
    tmp_path: Path,
) -> None:
    pki.init_ca(tmp_path)
    a, b = (pki.issue(name, tmp_path, tmp_path) for name in ("a", "b"))
    table = {"certificate": str(a.certificate), "key": str(b.key), "ca": "ca.pem"}
    with pytest.raises(ValueError, match=r"\[tls\] certificate and key: .*a.pem and .*b-key.pem"):
        TlsSettings.from_table(table, base=tmp_path)
    table["key"] = str(a.key)
    assert TlsSettings.from_table(table, base=tmp_path).key == a.key


def test_mutual_tls_without_a_peer_certificate_in_the_scope_is_a_mismatch(
    tmp_path: Path,
) -> None:
    """An app served without the certificate-passing protocol refuses every participant."""
    (tmp_path / "f.pem").write_text("x")
    f = tmp_path / "f.pem"
    mutual = TlsSettings(certificate=f, key=f, client_ca=f)
    assert certificate_mismatch({"type": "http"}, "hospital-a", tls=TlsSettings()) is None
    problem = certificate_mismatch({"type": "http"}, "hospital-a", tls=mutual)
    assert problem is not None and "no client certificate" in problem


def _scope_with_certificate_of(folder: Path, name: str, token: str) -> dict[str, Any]:
    """An ASGI scope as served under mutual TLS: ``name``'s certificate and ``token``."""
    pem = (folder / f"{name}.pem").read_text("ascii")
    return {
        "type": "http", "headers": [(b"authorization", f"Bearer {token}".encode())],
        "extensions": {"tls": {"client_cert_chain": [pem]}},
    }


def test_the_counting_service_takes_the_coordinators_token_with_its_configured_name(
    tmp_path: Path,
) -> None:
    pki.init_ca(tmp_path)
    for name in ("counting", "coordinator", "coord-east"):
        pki.issue(name, tmp_path, tmp_path)
    table = {"certificate": "counting.pem", "key": "counting-key.pem", "client_ca": "ca.pem",
             "coordinator_name": "coord-east"}
    tls = TlsSettings.from_table(table, base=tmp_path, allowed=COUNTING_KEYS)
    assert TlsSettings.from_table(
        {k: v for k, v in table.items() if k != "coordinator_name"}, base=tmp_path
    ).coordinator_name == "coordinator"  # what `fedclust pki issue coordinator` names
    settings = CountingSettings(
        coordinator_token_sha256=token_sha256("coordinator-token"),
        database_url=f"sqlite:///{tmp_path / 'c.db'}", tls=tls,
    )
    store = CountingStore(settings.database_url)
    members = Members(settings, store)
    named = _scope_with_certificate_of(tmp_path, "coord-east", "coordinator-token")
    default = _scope_with_certificate_of(tmp_path, "coordinator", "coordinator-token")
    try:
        assert caller_of(named, settings, members) == CoordinatorIdentity()
        with pytest.raises(HTTPException) as refused:
            caller_of(default, settings, members)
    finally:
        store.close()
    assert refused.value.status_code == 403
    assert "does not name coordinator 'coord-east'" in refused.value.detail


def test_coordinator_name_is_a_counting_service_key(tmp_path: Path) -> None:
    pki.init_ca(tmp_path)
    own = pki.issue("svc", tmp_path, tmp_path)
    table = {"certificate": str(own.certificate), "key": str(own.key), "ca": "ca.pem",
             "coordinator_name": "coordinator"}
    with pytest.raises(ValueError, match="unknown key"):
        TlsSettings.from_table(table, base=tmp_path)  # a coordinator's or agent's [tls]
    with pytest.raises(ValueError, match="coordinator_name must be the name"):
        TlsSettings.from_table(table | {"coordinator_name": " "}, base=tmp_path,
                               allowed=COUNTING_KEYS)
